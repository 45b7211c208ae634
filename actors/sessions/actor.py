"""SessionActor: one session's runs, one live at a time, owning the stream ``session/<id>``.

A thin shell around :mod:`actors.sessions.state` (the state: a fold of its stream, rebuilt
identically when the directory wakes it after passivation or a failure) and
:mod:`actors.sessions.decide` (what to append). A message arriving while a run is live is
accepted at once (``run.accepted`` is durable before the caller hears back) and waits its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from concurrent.futures import Future
from functools import partial
from typing import Any

import msgspec
import pykka

from actors.actor_threads import PooledActor
from actors.aggregate import fold
from actors.errors import BudgetExceeded, Conflict, InvalidCommand, UnknownRun, UnknownSession
from actors.messages import (
    BranchSession,
    CancelRun,
    CompactionOutcome,
    CompactSession,
    CreateSession,
    GetSessionState,
    GrantAdded,
    Passivate,
    Reply,
    ResetSession,
    ResolveSession,
    RestoreSession,
    RunFinished,
    RunTicket,
    SessionIdle,
    SessionInfo,
    SessionStopped,
    SetSessionPosture,
    StartRun,
    SummaryWritten,
    ToSession,
    reject,
    resolve,
)
from actors.runs import state as run_fold
from actors.runs.actor import RunActor
from actors.runs.context import Prior, prior_budget, prior_of
from actors.services import Services
from actors.sessions import state as session_state
from actors.sessions.compaction import (
    CompactionPlan,
    Limits,
    compacted,
    extractive_summary,
    history_tokens,
    model_request,
    model_summary,
    plan,
    still_applies,
    write_summary,
)
from actors.sessions.decide import branch_history, compaction_due, created, decide, refused
from actors.sessions.state import SessionState, checkpoint_of
from actors.stream import Recorded, recorded
from events import new_id
from events.catalog import CompactionMethod, Event, RunAccepted, SessionCompacted

log = logging.getLogger("reel.sessions")

EXTRACTIVE_PROVIDERS = frozenset({"deterministic"})
"""Providers whose sessions get extractive summaries (the deterministic provider echoes; a
summary it "wrote" would be the prompt). Every other provider writes its session's summaries."""
AUTO_PRINCIPAL = "node"
"""The principal of automatic compactions: the node's own decision, as time-outs are."""


class PassivationRefused(msgspec.Struct, frozen=True):
    """Session -> directory: not idle after all; keep delivering to it."""

    session_id: str


class _Queued(msgspec.Struct, frozen=True):
    accepted: Recorded
    """Its ``run.accepted`` as stored (redacted), with who sent the message."""

    @property
    def run_id(self) -> str:
        assert isinstance(self.accepted.event, RunAccepted)
        return self.accepted.event.run_id


class SessionActor(PooledActor):
    """Owns ``session/<session_id>``. Started (and restarted) only by the directory."""

    def __init__(
        self,
        services: Services,
        session_id: str,
        create: CreateSession | None = None,
        state: SessionState | None = None,
    ) -> None:
        super().__init__()
        self.s = services
        self.session_id = session_id
        self.stream = f"session/{session_id}"
        self.create = create
        self.state: SessionState | None = state
        """Folded from the stream; handed over by the directory when it kept it."""
        self.active: str | None = None
        self.queue: deque[_Queued] = deque()
        self.writing: str | None = None
        """The compaction whose summary the model is writing (no second one meanwhile)."""
        self.unmade = False
        """The journal refused ``session.created``: the session does not exist."""

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        try:
            self._start()
        except Exception as exc:
            # pykka calls no on_failure for a start that failed: tell the directory, and answer
            # what was delivered meanwhile (handed back, it would only fail the same way)
            self._refuse_inbox(exc)
            self._tell_directory(
                SessionStopped(self.session_id, urn=self.actor_urn, unmade=self.unmade)
            )
            raise

    def _start(self) -> None:
        if self.create is not None:
            c = self.create
            try:
                self._append(created(self.session_id, c), principal=c.principal)
            except Exception as exc:  # nothing was created: its callers hear why
                self.unmade = True
                reject(c.reply, exc)
                raise
            if c.then is None:
                resolve(c.reply, msgspec.structs.replace(self._info(), created=True))
                self._report_idle()
        elif self.state is None:
            stored = self.s.journal.read_stream(self.stream)
            self.state = fold(session_state, recorded(stored))
            if self.state is None:
                self.unmade = True
                raise UnknownSession(f"no session with id {self.session_id!r}")
        live = self.s.registry.live_runs_of(self.session_id)
        self.active = live[0] if live else None

    def _refuse_inbox(self, error: Exception) -> None:
        """Answer every command already delivered with ``error``."""
        while not self.actor_inbox.empty():
            message = self.actor_inbox.get().message
            reject(getattr(message, "reply", None), error)

    def on_stop(self) -> None:
        self._tell_directory(SessionStopped(self.session_id, self.actor_urn, self.state))

    def on_failure(self, *_: object) -> None:
        """Report the failure, and hand the commands still in the inbox back to the directory:
        it restarts the session by replay and delivers them there, so no caller is left
        waiting on a reply that a dead actor would never give."""
        leftovers: list[Any] = []
        while not self.actor_inbox.empty():
            envelope = self.actor_inbox.get()
            if isinstance(envelope.message, msgspec.Struct):  # ours, not pykka's own
                leftovers.append(envelope.message)
        self._tell_directory(
            SessionStopped(self.session_id, urn=self.actor_urn, unmade=self.unmade)
        )
        for message in leftovers:
            self._tell_directory(ToSession(self.session_id, message))

    def on_receive(self, message: Any) -> Any:
        try:
            self._handle(message)
        except Exception as exc:
            # pykka stops the actor; whoever waits on this command must not hang.
            reject(getattr(message, "reply", None), exc)
            raise
        if self.active is None and not self.queue and not isinstance(message, Passivate):
            # Nothing live: give the thread back. The directory keeps the folded state.
            self._report_idle()
        return None

    def _report_idle(self) -> None:
        """Tell the directory that nothing is live here, when that stops the session at once
        (:attr:`ActorsConfig.passivates_at_once`); otherwise its tick finds the session idle,
        and the message (a thread hand-off after every run) would change nothing."""
        if self.s.config.passivates_at_once:
            self._tell_directory(SessionIdle(self.session_id, self.actor_urn))

    def _handle(self, message: Any) -> None:
        if isinstance(message, StartRun):
            self._start_run(message)
        elif isinstance(message, RunFinished):
            if message.run_id == self.active:
                self.active = None
                self._start_next()
                if self._idle():
                    self._auto_compact()
        elif isinstance(message, CompactSession):
            self._compact(message)
        elif isinstance(message, RestoreSession):
            self._restore(message)
        elif isinstance(message, SummaryWritten):
            self._summary_written(message)
        elif isinstance(message, CancelRun):
            self._cancel_queued(message)
        elif isinstance(message, ResetSession | ResolveSession):
            self._append(*self._decide(message), principal=message.principal)
            reset = isinstance(message, ResetSession) or message.reset
            resolve(message.reply, self._info(reset_applied=reset))
        elif isinstance(message, BranchSession):
            self._branch(message)
        elif isinstance(message, GrantAdded):
            self._append(*self._decide(message), principal=message.grant.decided_by or "system")
        elif isinstance(message, SetSessionPosture):
            try:
                events = self._decide(message)
            except InvalidCommand as exc:
                reject(message.reply, exc)
                return
            self._append(*events, principal=message.principal)
            resolve(message.reply, self._info())
        elif isinstance(message, GetSessionState):
            resolve(message.reply, self.state)
        elif isinstance(message, Passivate):
            if self.active is None and not self.queue:
                self.stop()
            else:
                self._tell_directory(PassivationRefused(self.session_id))

    # --- commands --------------------------------------------------------------------------

    def _decide(self, command: Any, run_id: str = "") -> tuple[Event, ...]:
        assert self.state is not None
        return decide(self.state, command, run_id=run_id, tools=self.s.catalog)

    def _append(self, *events: Event, principal: str = "system") -> list[Recorded]:
        """Append ``events`` (stating the seq the folded state expects) and fold them; returns
        them as stored (redacted). Appending nothing is a no-op."""
        if not events:
            return []
        first = events[0]
        result = self.s.journal.append(
            self.stream,
            events,
            expected_seq=0 if self.state is None else self.state.next_seq,
            principal=principal,
            correlation_id=first.run_id if isinstance(first, RunAccepted) else None,
            causation_id=None,
            home=self.session_id,
        )
        records = [
            Recorded(e, self.stream, result.recorded_at_ms, principal) for e in result.events
        ]
        self.state = fold(session_state, records, self.state)
        return records

    def _start_run(self, message: StartRun) -> None:
        assert self.state is not None
        if message.run_id is not None and not self._decide(message):
            resolve(  # asked again (after a crash): the run exists, nothing starts twice
                message.reply,
                RunTicket(
                    run_id=message.run_id,
                    session_id=self.session_id,
                    queued=any(q.run_id == message.run_id for q in self.queue),
                ),
            )
            return
        if self._refused_by_budget(message):
            return
        if self._idle():
            # The previous run's RunFinished may still be on the way: the compaction due after
            # it is made before this run is accepted, so this run sees its summary.
            self._auto_compact()
        (accepted,) = self._append(
            *self._decide(message, run_id=new_id()), principal=message.principal
        )
        assert isinstance(accepted.event, RunAccepted)
        run_id = accepted.event.run_id
        self.s.turns.accepted(run_id, accepted.event.text)
        queued = _Queued(accepted)
        # The active run may have ended with its RunFinished still on the way: the registry
        # knows first.
        busy = bool(self.queue) or self._live_active() is not None
        if busy:
            self.queue.append(queued)
            self.s.registry.run_queued(run_id, self.session_id)
        else:
            self._launch(queued)  # registered before the caller hears of the run
        resolve(
            message.reply,
            RunTicket(
                run_id=run_id,
                session_id=self.session_id,
                session_created=message.session_created,
                queued=busy,
            ),
        )

    def _refused_by_budget(self, message: StartRun) -> bool:
        """Refuse the message when a hard budget of its principal or this session is reached:
        ``budget.refused`` is recorded (by the sender), then the caller hears
        :class:`BudgetExceeded`; no run is accepted."""
        guard = self.s.budgets
        if guard is None:
            return False
        found = guard.refusal(message.principal, self.session_id, time.time_ns() // 1_000_000)
        if found is None:
            return False
        assert self.state is not None
        self._append(refused(self.state, found), principal=message.principal)
        reject(message.reply, BudgetExceeded(found.budget, found.describe()))
        return True

    def _live_active(self) -> str | None:
        """The active run unless it has already ended: its RunFinished may still be on the way,
        but the registry forgets a run before its end is visible on the journal."""
        if self.active is not None and self.s.registry.live_run(self.active) is not None:
            return self.active
        return None

    def _start_next(self) -> None:
        if self.queue:
            self._launch(self.queue.popleft())

    def _launch(self, q: _Queued, cancelled_by: str | None = None) -> None:
        assert self.state is not None
        if cancelled_by is None:
            self.active = q.run_id
        cfg = self.s.config
        run = run_fold.initial(q.accepted)
        assert run is not None
        prior = self.s.turns.prior(
            self.s.journal,
            prior_of(self.state.history, q.run_id),
            self.state.compaction,
            prior_budget(cfg.context_budget_tokens, cfg.system_prompt, run.text),
        )
        ref = RunActor.start(
            self.s,
            state=run,
            prior=prior,
            grants=self.state.grants,
            postures=self.state.overrides,
            cancelled_by=cancelled_by,
        )
        self.s.registry.run_started(q.run_id, self.session_id, ref)

    def _cancel_queued(self, message: CancelRun) -> None:
        for queued in self.queue:
            if queued.run_id == message.run_id:
                self.queue.remove(queued)
                self._launch(queued, cancelled_by=message.principal)
                resolve(message.reply, True)
                return
        live = self.s.registry.live_run(message.run_id)
        if live is not None:  # launched between the directory's look-up and this message
            try:
                live.tell(message)
                return
            except pykka.ActorDeadError:
                pass
        reject(message.reply, UnknownRun(f"run {message.run_id} is not queued here"))

    def _branch(self, message: BranchSession) -> None:
        assert self.state is not None
        live = self._live_active()
        unfinished = {*([live] if live else []), *(q.run_id for q in self.queue)}
        try:
            base = branch_history(self.state, message.run_id, unfinished)
        except InvalidCommand as exc:
            reject(message.reply, exc)
            return
        create = CreateSession(
            session_key=message.session_key,
            label=message.label,
            parent_session_id=self.session_id,
            branched_from_run_id=base[-1] if base else None,
            history=base,
            principal=message.principal,
            reply=message.reply,
        )
        elsewhere = self.s.elsewhere
        if message.session_key is None or elsewhere is None:
            self._tell_directory(create)
            return
        # In a cluster the key's shard decides whether it is taken and holds the new session:
        # its owner creates it, here or on another node (the router's choice).
        try:
            created = elsewhere(msgspec.structs.replace(create, reply=None))
        except Exception as exc:  # the node stopping: its loop is gone
            reject(message.reply, exc)
            return
        created.add_done_callback(partial(_settle, message.reply))

    # --- compaction (actors/sessions/compaction.py decides; docs/context.md)
    # --------------------------

    def _idle(self) -> bool:
        """No run of the session is live, queued, or waiting for a human."""
        return (
            self._live_active() is None
            and not self.queue
            and not self.s.registry.live_runs_of(self.session_id)
        )

    def _history(self) -> Prior:
        """The session's history as the next run would see it, without a budget."""
        assert self.state is not None
        return self.s.turns.prior(self.s.journal, self.state.history, self.state.compaction)

    def _auto_compact(self) -> None:
        """After a run: compact when the history is over the threshold and the last compaction
        is older than the cooldown. A failure here is logged; the session goes on."""
        cfg, state = self.s.config, self.state
        if cfg.compact_at <= 0 or self.writing is not None or state is None:
            return
        try:
            prior = self._history()
            limits = Limits.of(cfg)
            due = compaction_due(
                state,
                history_tokens(prior),
                limits,
                now_ms=time.time_ns() // 1_000_000,
                cooldown_s=cfg.compact_cooldown_s,
            )
            if not due:
                return
            planned = plan(
                state,
                prior,
                limits,
                compaction_id=new_id(),
                trigger="auto",
                principal=AUTO_PRINCIPAL,
            )
            if planned is not None:
                self._write(planned, None)
        except Exception:
            log.warning("automatic compaction of session %s failed", self.session_id, exc_info=True)

    def _compact(self, message: CompactSession) -> None:
        assert self.state is not None
        if not self._idle():
            reject(
                message.reply,
                Conflict(
                    f"session {self.session_id} has a run in progress or queued; "
                    "compact it once the run has ended"
                ),
            )
            return
        if self.writing is not None:
            reject(
                message.reply,
                Conflict(
                    f"compaction {self.writing} of session {self.session_id} is being written"
                ),
            )
            return
        planned = plan(
            self.state,
            self._history(),
            Limits.of(self.s.config),
            compaction_id=new_id(),
            trigger="request",
            principal=message.principal,
        )
        if planned is None:
            reject(
                message.reply,
                Conflict(
                    f"session {self.session_id} has no completed run left to condense "
                    "(every one is covered by the summary in force, or none completed)"
                ),
            )
            return
        self._write(planned, message.reply)

    def _write(self, planned: CompactionPlan, reply: Any) -> None:
        """Write the summary: extractive at once, or ask the model on the I/O loop (the answer
        comes back as :class:`SummaryWritten`, through the directory)."""
        if self.s.provider.name in EXTRACTIVE_PROVIDERS:
            summary = extractive_summary(planned.previous, planned.condensed, planned.summary_cap)
            self._record(planned, summary, "extractive", reply)
            return
        self.writing = planned.compaction_id
        self.s.io.submit(_ask_model(self.s, planned))
        resolve(reply, _outcome(planned, "writing", "model"))

    def _summary_written(self, message: SummaryWritten) -> None:
        assert self.state is not None
        planned = message.plan
        if self.writing == planned.compaction_id:
            self.writing = None
        if not still_applies(self.state, planned):
            log.info(
                "compaction %s of session %s dropped: the session changed while it was written",
                planned.compaction_id,
                self.session_id,
            )
            return
        if message.summary is None:
            log.warning(
                "the model could not summarize session %s (%s); recording an extractive summary",
                self.session_id,
                message.error,
            )
            summary = extractive_summary(planned.previous, planned.condensed, planned.summary_cap)
            self._record(planned, summary, "extractive", None)
        else:
            self._record(
                planned, model_summary(message.summary, planned.summary_cap), "model", None
            )

    def _record(
        self, planned: CompactionPlan, summary: str, method: CompactionMethod, reply: Any
    ) -> None:
        (rec,) = self._append(compacted(planned, summary, method), principal=planned.principal)
        event = rec.event
        assert isinstance(event, SessionCompacted)
        resolve(
            reply,
            msgspec.structs.replace(
                _outcome(planned, "compacted", method),
                tokens_after=event.tokens_after,
                summary=event.summary,
            ),
        )

    def _restore(self, message: RestoreSession) -> None:
        assert self.state is not None
        if not self._idle():
            reject(
                message.reply,
                Conflict(
                    f"session {self.session_id} has a run in progress or queued; "
                    "restore it once the run has ended"
                ),
            )
            return
        try:
            events = self._decide(message)
        except InvalidCommand as exc:
            reject(message.reply, exc)
            return
        self._append(*events, principal=message.principal)
        resolve(message.reply, checkpoint_of(self.state, message.checkpoint_id))

    def _info(self, *, reset_applied: bool = False) -> SessionInfo:
        assert self.state is not None
        return SessionInfo(
            session_id=self.session_id,
            session_key=self.state.session_key,
            label=self.state.label,
            parent_session_id=self.state.parent_session_id,
            reset_applied=reset_applied,
        )

    def _tell_directory(self, message: Any) -> None:
        directory = self.s.directory
        if directory is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                directory.tell(message)


def _settle(reply: Reply, done: Future[Any]) -> None:
    """Complete ``reply`` as ``done`` ended."""
    error = done.exception()
    if error is not None:
        reject(reply, error)
    else:
        resolve(reply, done.result())


def _outcome(planned: CompactionPlan, status: str, method: CompactionMethod) -> CompactionOutcome:
    return CompactionOutcome(
        session_id=planned.session_id,
        compaction_id=planned.compaction_id,
        status="compacted" if status == "compacted" else "writing",
        method=method,
        covers=planned.covers,
        condensed=len(planned.condensed),
        tokens_before=planned.tokens_before,
    )


async def _ask_model(services: Services, planned: CompactionPlan) -> None:
    """On the I/O loop: ask the session's model for the summary; tell the session (through
    the directory, which wakes it if it passivated meanwhile)."""
    try:
        text = await write_summary(services.provider, model_request(planned))
        message = SummaryWritten(
            plan=planned, summary=text or None, error="" if text else "the model wrote nothing"
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        message = SummaryWritten(plan=planned, summary=None, error=f"{type(exc).__name__}: {exc}")
    directory = services.directory
    if directory is not None:
        with contextlib.suppress(pykka.ActorDeadError):
            directory.tell(ToSession(planned.session_id, message))
