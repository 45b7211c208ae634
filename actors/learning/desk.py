"""Post-run reflection and the review of what it learned (docs/learning.md).

- :class:`Reflector` reflects on one completed run (the ``post_run_reflection`` task's
  handler): it reads the run's events, finds facts, preferences and procedures
  (:mod:`actors.learning.rules`) and hands each to the desk.
- :class:`LearningDesk` is the one writer of ``learning/<candidate_id>`` streams: it merges a
  finding into its candidate, applies a candidate whose confidence reaches its kind's
  threshold (as ``reflection``), and carries out reviews (accept, reject, rollback) for the
  HTTP API and the CLI. Every append states the stream's expected seq from a fold of the
  stream itself, so two writers racing (two workers, a worker and a reviewer) never both win:
  the loser folds again and decides again.

Applying a fact writes a memory item (source ``learned``) through :class:`FactMemory` (the
node's one memory writer), queued just before the apply's event so that both share a commit
(one commit per learned fact, not two; the item never commits after the event); its id is
derived from the candidate and how many times it was applied, so an apply retried after a
crash finds its item instead of writing a second one. A rollback deletes that item before it
is recorded. Preferences and procedures need no write:
the learning view offers applied ones to later runs (``LearningView.offered``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, Protocol

import msgspec

from actors.aggregate import fold
from actors.io_loop import IoLoop
from actors.learning import state as learning_state
from actors.learning.rules import (
    InvalidReflection,
    Proposal,
    RunDigest,
    digest,
    known_procedure,
    model_proposals,
    model_request,
    more_evidence,
    parse_model_answer,
    procedure,
    procedure_run,
    statements,
)
from actors.learning.state import (
    MAX_EVIDENCE_RUNS,
    REFLECTION,
    CandidateConflict,
    CandidateState,
    UnknownCandidate,
    due_with,
    may_accept,
    may_roll_back,
    observe,
    reject,
    stream_of,
)
from actors.provider import ModelProvider
from actors.sessions.compaction import write_summary
from actors.stream import Recorded, recorded
from actors.tasks.handlers import PermanentFailure, TaskInterrupted
from events import ConcurrencyConflict, Event, JournalPort, is_ulid
from events.catalog import Extractor, LearningCandidateApplied, LearningCandidateRolledBack
from events.fields import REASON_MAX_CHARS
from events.ids import encode_ulid
from projections.learning import KnownProcedure, PeerRun

log = logging.getLogger("reel.learning")

TASK_KIND = "post_run_reflection"
"""The task kind of a reflection (one per completed run; dedupe key ``reflection:<run_id>``)."""
RULES_PROVIDERS = frozenset({"deterministic"})
"""Providers whose runs are reflected on by the rules (the deterministic provider echoes: it
has nothing to say about a run)."""
BATCH_MAX_RUNS = 100
"""The most runs one reflection task covers."""
_RACES = 8
"""How often a write that lost a race to another writer is decided again before giving up."""


Bps = Annotated[int, msgspec.Meta(ge=0, le=10_001)]
"""A threshold in basis points: 0-10000, or 10001 for "never automatically"."""


class LearningSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How reflection runs and when it applies what it found (``[learning]`` in config.toml,
    ``REEL_LEARNING_*``)."""

    enabled: bool = True
    """Reflect on every completed run (a ``post_run_reflection`` task each). Off: no new
    reflections; applied learnings are still offered and reviews still work."""
    apply_fact_bps: Bps = 8_000
    apply_preference_bps: Bps = 10_001
    apply_procedure_bps: Bps = 9_000
    """A pending candidate whose confidence reaches its kind's threshold (basis points) is
    applied by ``reflection``; below it, it waits for review. 10001: never automatically, the
    preferences' default (a preference steers every later run: a reviewer accepts it first)."""
    extractor: Literal["auto", "rules", "model"] = "auto"
    """``auto``: the rules with the deterministic provider, the node's model otherwise."""
    model_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 60.0
    """How long the model may take to answer one reflection (then the attempt fails)."""
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    """Attempts of one reflection task before it is recorded failed."""
    batch_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.5
    """With the rules, runs that complete within this many seconds are reflected on by one
    task (at most :data:`BATCH_MAX_RUNS`): a task's own events (enqueued, claimed, succeeded)
    then cost a few appends per batch, not per run, so reflection does not slow busy nodes. A
    model reflects on each run in a task of its own. 0: a task per run."""

    def threshold(self, kind: str) -> int:
        return {
            "fact": self.apply_fact_bps,
            "preference": self.apply_preference_bps,
            "procedure": self.apply_procedure_bps,
        }[kind]


class FactMemory(Protocol):
    """Where an applied fact goes: the node's memory writer (``actors.memory.items``)."""

    def remember(
        self, text: str, *, owner: str, item_id: str, candidate_id: str
    ) -> Callable[[], None]:
        """Queue the write of item ``item_id`` (scope ``principal`` of ``owner``, source
        ``learned``) and return a wait that returns once it is durable; an item already
        written under that id is left as it is (a retried apply). What the caller appends
        before it waits commits with the item or after it, never before: the apply's event
        shares the item's commit."""
        ...

    def forget(self, item_id: str, *, by: str, reason: str, candidate_id: str) -> None:
        """Delete the item as ``by``; one already deleted (or never written) is no error."""
        ...


class RunHistory(Protocol):
    """What reflection compares a run with: the procedures already proposed and the earlier
    runs (``LearningView.procedures`` and ``.peers``)."""

    def procedures(
        self, principal: str, tools: tuple[str, ...], *, position: int
    ) -> Sequence[KnownProcedure]: ...

    def peers(
        self, principal: str, tools: tuple[str, ...], *, run_id: str, position: int
    ) -> Sequence[PeerRun]: ...


class Reflection(msgspec.Struct, frozen=True, kw_only=True):
    """What one reflection did (the task's result)."""

    run_id: str
    extractor: str
    candidates: tuple[str, ...] = ()
    """The candidates it proposed or added evidence to."""
    applied: tuple[str, ...] = ()
    """Those it applied (their kind's threshold reached)."""
    skipped: str = ""
    """Why nothing was looked for (the run did not complete)."""


class UnknownRunToReflect(LookupError):
    """The task names a run the journal does not hold (retrying cannot help)."""


def memory_item_id(candidate_id: str, applies: int) -> str:
    """The id of the memory item a fact's ``applies``-th apply writes (from 0)."""
    seed = hashlib.sha256(f"learned-memory\0{candidate_id}\0{applies}".encode()).digest()
    return encode_ulid(int.from_bytes(seed[:16], "big"))


class LearningDesk:
    """The writer of every ``learning/<candidate_id>`` stream; safe from many threads."""

    def __init__(
        self,
        journal: JournalPort,
        settings: LearningSettings | None = None,
        memory: FactMemory | None = None,
    ) -> None:
        self.journal = journal
        self.settings = settings or LearningSettings()
        self.memory = memory

    def state(self, candidate_id: str) -> CandidateState | None:
        """The candidate as its stream says it is now (never lags, unlike the view)."""
        if not is_ulid(candidate_id):
            return None
        return fold(learning_state, recorded(self.journal.read_stream(stream_of(candidate_id))))

    def _known(self, candidate_id: str) -> CandidateState:
        state = self.state(candidate_id)
        if state is None:
            raise UnknownCandidate(f"no learning candidate with id {candidate_id[:40]!r}")
        return state

    def _append(
        self,
        state: CandidateState | None,
        candidate_id: str,
        events: list[Event],
        *,
        principal: str,
        causation_id: str | None = None,
        item: Callable[[], None] | None = None,
    ) -> CandidateState:
        """Append ``events`` (one atomic append) at the seq ``state`` expects; the state after
        them. Raises ``ConcurrencyConflict`` when another writer appended first. ``item``: the
        wait of an applied fact's memory write, queued just before: the events are queued
        behind it (so they share its commit, or follow it) and both are waited for."""
        stream = stream_of(candidate_id)
        expected = 0 if state is None else state.next_seq
        if item is None:
            result = self.journal.append(
                stream,
                events,
                expected_seq=expected,
                principal=principal,
                causation_id=causation_id,
            )
        else:
            future = self.journal.submit(
                stream,
                events,
                expected_seq=expected,
                principal=principal,
                causation_id=causation_id,
            )
            item()
            result = future.result()
        # The events as the journal stored them (redacted): what a reader folds.
        records = [Recorded(e, stream, result.recorded_at_ms, principal) for e in result.events]
        after = fold(learning_state, records, state)
        assert after is not None
        return after

    # --- findings ------------------------------------------------------------------------

    def record(self, proposal: Proposal, *, run_id: str) -> tuple[CandidateState, bool]:
        """Merge ``proposal`` into its candidate (proposing it when new) and apply it when it
        is due. Returns the candidate and whether this call applied it."""
        candidate_id = proposal.candidate_id
        for _ in range(_RACES):
            state = self.state(candidate_id)
            finding = observe(state, proposal)
            events: list[Event] = [] if finding is None else [finding]
            kind = state.kind if state is not None else proposal.kind
            threshold = self.settings.threshold(kind)
            applies = due_with(state, finding, threshold)
            applied: LearningCandidateApplied | None = None
            item: Callable[[], None] | None = None
            try:
                if applies:  # the finding and its apply in one append
                    confidence = getattr(finding, "confidence_bps", None)
                    if confidence is None and state is not None:
                        confidence = state.confidence_bps
                    reason = f"confidence {confidence} >= threshold {threshold}"
                    applied, item = self._applied(state or proposal, REFLECTION, reason)
                    events.append(applied)
                if not events:
                    assert state is not None  # nothing new: the candidate exists
                    return state, False
                return self._append(
                    state,
                    candidate_id,
                    events,
                    principal=REFLECTION,
                    causation_id=run_id,
                    item=item,
                ), applies
            except ConcurrencyConflict:
                # Another writer got there first: fold again and decide again.
                self._settle(candidate_id, applied, REFLECTION)
        raise CandidateConflict(f"candidate {candidate_id} kept changing; try again")

    # --- reviews -------------------------------------------------------------------------

    def accept(self, candidate_id: str, *, by: str, reason: str = "") -> CandidateState:
        """Apply the candidate as ``by`` (409 when it already is)."""
        _check_reason(reason)
        state = self._known(candidate_id)
        may_accept(state)
        applied, item = self._applied(state, by, reason)
        try:
            return self._write(state, [applied], by, item)
        except CandidateConflict:
            self._settle(candidate_id, applied, by)
            raise

    def reject(self, candidate_id: str, *, by: str, reason: str = "") -> CandidateState:
        """Refuse a pending candidate as ``by`` (409 when it is applied: roll it back)."""
        _check_reason(reason)
        state = self._known(candidate_id)
        return self._write(state, [reject(state, by, reason)], by)

    def rollback(self, candidate_id: str, *, by: str, reason: str = "") -> CandidateState:
        """Withdraw an applied candidate as ``by``: its memory item is deleted first."""
        _check_reason(reason)
        state = self._known(candidate_id)
        may_roll_back(state)
        item = state.memory_item_id if state.kind == "fact" else None
        if item is not None and self.memory is not None:
            self.memory.forget(item, by=by, reason=reason, candidate_id=candidate_id)
        event = LearningCandidateRolledBack(
            candidate_id=candidate_id, by=by, reason=reason, memory_item_id=item
        )
        return self._write(state, [event], by)

    def _write(
        self,
        state: CandidateState,
        events: list[Event],
        by: str,
        item: Callable[[], None] | None = None,
    ) -> CandidateState:
        try:
            return self._append(state, state.candidate_id, events, principal=by, item=item)
        except ConcurrencyConflict:
            raise CandidateConflict(
                f"candidate {state.candidate_id} changed meanwhile; look at it again"
            ) from None

    def _applied(
        self, candidate: CandidateState | Proposal, by: str, reason: str
    ) -> tuple[LearningCandidateApplied, Callable[[], None] | None]:
        """Make the candidate take effect (a fact: its memory item's write is queued now) and
        return the event that records it (``candidate``: its state, or the proposal of one not
        yet recorded) with the wait of that write, if any: the event, appended before the
        wait, shares the item's commit or follows it. If the event then loses a race,
        :meth:`_settle` decides what becomes of the item."""
        item = None
        wait = None
        if candidate.kind == "fact":
            if self.memory is None:
                raise CandidateConflict("this node has no memory to write an applied fact to")
            applies = candidate.applies if isinstance(candidate, CandidateState) else 0
            item = memory_item_id(candidate.candidate_id, applies)
            wait = self.memory.remember(
                candidate.text,
                owner=candidate.principal,
                item_id=item,
                candidate_id=candidate.candidate_id,
            )
        event = LearningCandidateApplied(
            candidate_id=candidate.candidate_id, by=by, memory_item_id=item, reason=reason
        )
        return event, wait

    def _settle(self, candidate_id: str, lost: LearningCandidateApplied | None, by: str) -> None:
        """After an apply lost a race: its memory item stays when the candidate is still
        pending (the next apply derives the same id and finds it) or was applied with it;
        otherwise (rejected or rolled back meanwhile) the item is deleted, so no fact is
        shown that the candidate's stream does not say is applied."""
        item = lost.memory_item_id if lost is not None else None
        if item is None or self.memory is None:
            return
        state = self.state(candidate_id)
        if state is None or state.status == "pending":
            return
        if state.status == "applied" and state.memory_item_id == item:
            return
        self.memory.forget(
            item, by=by, reason="its apply lost a race to a review", candidate_id=candidate_id
        )


def _check_reason(reason: str) -> None:
    from actors.errors import InvalidCommand

    if len(reason) > REASON_MAX_CHARS:
        raise InvalidCommand(
            "reason", f"is {len(reason):,} characters; the cap is {REASON_MAX_CHARS:,}"
        )


class Reflector:
    """Reflects on completed runs: the ``post_run_reflection`` handler's work."""

    def __init__(
        self,
        journal: JournalPort,
        desk: LearningDesk,
        history: RunHistory | None,
        *,
        provider: ModelProvider,
        io: IoLoop,
    ) -> None:
        self.journal = journal
        self.desk = desk
        self.history = history
        self.provider = provider
        self.io = io

    @property
    def extractor(self) -> Extractor:
        choice = self.desk.settings.extractor
        if choice == "auto":
            return "rules" if self.provider.name in RULES_PROVIDERS else "model"
        return choice

    def reflect(self, run_id: str, check: Callable[[], None] = lambda: None) -> Reflection:
        """Find what ``run_id`` teaches and record it. ``check`` raises to stop early (the
        task was cancelled, the node is stopping). Raises :class:`UnknownRunToReflect`,
        :class:`InvalidReflection` (the model's answer), ``TimeoutError`` or the provider's
        error; the run itself is never touched."""
        run = digest(self.journal.read_correlated(run_id)) if is_ulid(run_id) else None
        if run is None:
            raise UnknownRunToReflect(f"no run {run_id[:40]!r} in the journal")
        extractor = self.extractor
        if run.state != "done":
            return Reflection(run_id=run_id, extractor=extractor, skipped=f"run is {run.state}")
        proposals = statements(run) if extractor == "rules" else self._ask_model(run)
        check()
        found = self._procedure(run)
        if found is not None:
            proposals.append(found)
        touched: list[str] = []
        applied: list[str] = []
        for proposal in proposals:
            check()
            state, now_applied = self.desk.record(proposal, run_id=run_id)
            touched.append(state.candidate_id)
            if now_applied:
                applied.append(state.candidate_id)
        return Reflection(
            run_id=run_id, extractor=extractor, candidates=tuple(touched), applied=tuple(applied)
        )

    def _procedure(self, run: RunDigest) -> Proposal | None:
        """A run like a procedure already proposed is more of its evidence (nothing to look
        up once that evidence is full); otherwise the earlier runs may show a new one."""
        if self.history is None or not procedure_run(run):
            return None
        position = run.end_position
        known = known_procedure(
            run, self.history.procedures(run.principal, run.tools, position=position)
        )
        if known is not None:
            return more_evidence(run, known) if known.runs < MAX_EVIDENCE_RUNS else None
        peers = self.history.peers(run.principal, run.tools, run_id=run.run_id, position=position)
        return procedure(run, peers)

    def _ask_model(self, run: RunDigest) -> list[Proposal]:
        timeout = self.desk.settings.model_timeout_s
        future = self.io.submit(write_summary(self.provider, model_request(run), timeout))
        try:
            text = future.result(timeout + 5.0)
        except TimeoutError:
            future.cancel()
            raise TimeoutError(f"the model did not answer within {timeout:g} s") from None
        return model_proposals(run, parse_model_answer(text))

    def handle(self, payload: Any, context: Any) -> dict[str, Any]:
        """The task handler: ``payload`` is ``{"run_ids": [...]}`` (or ``{"run_id": ...}``);
        ``context`` the queue's :class:`~actors.tasks.handlers.TaskContext` (its ``check``
        stops early). Every run is reflected on even when one fails; then the first failure
        fails the attempt, and the retry reflects on them all again, which changes nothing
        for the runs already recorded (their evidence is known). A payload naming no run, or
        a run the journal does not hold, fails the task at once: retrying cannot help."""
        run_ids = _run_ids(payload)
        if run_ids is None:
            raise PermanentFailure('the payload names no run: {"run_ids": [...]} expected')
        check = getattr(context, "check", lambda: None)
        done: list[Reflection] = []
        failures: list[Exception] = []
        for run_id in run_ids:
            try:
                done.append(self.reflect(run_id, check))
            except UnknownRunToReflect as exc:
                raise PermanentFailure(str(exc)) from None
            except TaskInterrupted:
                raise
            except Exception as exc:  # the others are still reflected on
                failures.append(exc)
        if failures:
            raise failures[0]
        return {
            "runs": len(done),
            "candidates": sorted({c for r in done for c in r.candidates}),
            "applied": sorted({c for r in done for c in r.applied}),
        }


def _run_ids(payload: Any) -> list[str] | None:
    if not isinstance(payload, dict):
        return None
    one, many = payload.get("run_id"), payload.get("run_ids")
    if isinstance(one, str):
        return [one]
    if isinstance(many, list) and many and all(isinstance(r, str) for r in many):
        return list(many)
    return None


__all__ = [
    "TASK_KIND",
    "CandidateConflict",
    "FactMemory",
    "InvalidReflection",
    "LearningDesk",
    "LearningSettings",
    "Reflection",
    "Reflector",
    "RunHistory",
    "UnknownCandidate",
    "UnknownRunToReflect",
]
