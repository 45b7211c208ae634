"""One learning candidate: its state folded from ``learning/<candidate_id>`` (an
:class:`actors.aggregate.Aggregate`: ``learning.candidate_proposed`` starts it), and the pure
decisions on it (a finding merged, applied, rejected, rolled back).

::

    pending --accept / confidence >= threshold--> applied --rollback--> rolled_back
       |                                             ^                      |
       +--reject--> rejected ----------accept--------+----------accept------+

A duplicate finding adds evidence whatever the status, but only a ``pending`` candidate is
applied by reflection: a human's reject or rollback stands until a human accepts it again.
Every refusal is a :class:`CandidateConflict` (HTTP 409) saying what to do instead.
"""

from __future__ import annotations

import msgspec

from actors.errors import Conflict, NotFound
from actors.learning.rules import Proposal, merged_confidence
from actors.stream import Recorded
from events import Event
from events.catalog import (
    CandidateStatus,
    LearningCandidateApplied,
    LearningCandidateProposed,
    LearningCandidateRejected,
    LearningCandidateRolledBack,
    LearningEvidenceAdded,
)

REFLECTION = "reflection"
"""The principal of what reflection does on its own: proposals, merges, automatic applies."""
MAX_EVIDENCE_RUNS = 20
"""A candidate keeps the evidence of at most this many runs: confidence has stopped growing
long before (a statement at 5 runs, a procedure at 6), and a procedure used every day would
otherwise add a row to its stream for every run, forever."""


class UnknownCandidate(NotFound):
    """No learning candidate has that id."""


class CandidateConflict(Conflict):
    """The candidate's status refuses the review (accepted twice, rejecting an applied one)."""


class CandidateState(msgspec.Struct, frozen=True, kw_only=True):
    """A candidate as its stream says it is now."""

    candidate_id: str
    kind: str
    text: str
    principal: str
    confidence_bps: int
    runs: tuple[str, ...]
    status: CandidateStatus = "pending"
    memory_item_id: str | None = None
    """The memory item the last apply of a fact produced."""
    applies: int = 0
    """How many times it was applied (a fact's memory item id is derived from this)."""
    next_seq: int = 0

    @property
    def stream(self) -> str:
        return stream_of(self.candidate_id)


def stream_of(candidate_id: str) -> str:
    return f"learning/{candidate_id}"


def initial(first: Recorded) -> CandidateState | None:
    """The candidate its ``learning.candidate_proposed`` starts (None for another record)."""
    event = first.event
    if not isinstance(event, LearningCandidateProposed):
        return None
    if first.stream != stream_of(event.candidate_id):
        return None
    return CandidateState(
        candidate_id=event.candidate_id,
        kind=event.learning_kind,
        text=event.text,
        principal=event.principal,
        confidence_bps=event.confidence_bps,
        runs=event.runs,
        next_seq=1,
    )


def apply(state: CandidateState, rec: Recorded) -> CandidateState:
    """Fold one record of the candidate's stream (one of another stream changes nothing)."""
    if rec.stream != state.stream:
        return state
    event = rec.event
    replace = msgspec.structs.replace
    nxt = state.next_seq + 1
    if isinstance(event, LearningEvidenceAdded):
        runs = state.runs + tuple(r for r in event.runs if r not in state.runs)
        return replace(state, runs=runs, confidence_bps=event.confidence_bps, next_seq=nxt)
    if isinstance(event, LearningCandidateApplied):
        return replace(
            state,
            status="applied",
            memory_item_id=event.memory_item_id or state.memory_item_id,
            applies=state.applies + 1,
            next_seq=nxt,
        )
    if isinstance(event, LearningCandidateRejected):
        return replace(state, status="rejected", next_seq=nxt)
    if isinstance(event, LearningCandidateRolledBack):
        return replace(state, status="rolled_back", next_seq=nxt)
    return replace(state, next_seq=nxt)


# --- decisions --------------------------------------------------------------------------------


def observe(state: CandidateState | None, proposal: Proposal) -> Event | None:
    """What a finding adds: the candidate itself when new, its runs not yet in the evidence
    otherwise (up to :data:`MAX_EVIDENCE_RUNS`), nothing when every run is known (a reflection
    retried, a run seen twice) or the evidence is full."""
    if state is None:
        return LearningCandidateProposed(
            candidate_id=proposal.candidate_id,
            learning_kind=proposal.kind,
            text=proposal.text,
            principal=proposal.principal,
            confidence_bps=proposal.confidence_bps,
            dedupe_key=proposal.dedupe_key,
            runs=proposal.runs,
            positions=proposal.positions,
            trigger=proposal.trigger,
            tools=proposal.tools,
            extractor=proposal.extractor,
        )
    room = MAX_EVIDENCE_RUNS - len(state.runs)
    new = [i for i, run in enumerate(proposal.runs) if run not in state.runs][: max(room, 0)]
    if not new:
        return None
    runs = tuple(proposal.runs[i] for i in new)
    positions = tuple(proposal.positions[i] for i in new if i < len(proposal.positions))
    return LearningEvidenceAdded(
        candidate_id=state.candidate_id,
        runs=runs,
        positions=positions,
        confidence_bps=merged_confidence(
            state.kind, state.confidence_bps, proposal.confidence_bps, len(state.runs) + len(runs)
        ),
    )


def due(state: CandidateState, threshold_bps: int) -> bool:
    """Whether reflection applies it now: pending, and as confident as its kind requires."""
    return state.status == "pending" and state.confidence_bps >= threshold_bps


def due_with(state: CandidateState | None, finding: Event | None, threshold_bps: int) -> bool:
    """Whether reflection applies the candidate in the same append as ``finding`` (what
    :func:`observe` made of a proposal): :func:`due` once the finding is recorded."""
    status = state.status if state is not None else "pending"
    confidence = state.confidence_bps if state is not None else 0
    if isinstance(finding, LearningCandidateProposed | LearningEvidenceAdded):
        confidence = finding.confidence_bps
    return status == "pending" and confidence >= threshold_bps


def may_accept(state: CandidateState) -> None:
    """Accept: from pending, rejected or rolled back (a human may change their mind)."""
    if state.status == "applied":
        raise CandidateConflict(f"candidate {state.candidate_id} is already applied")


def reject(state: CandidateState, by: str, reason: str) -> LearningCandidateRejected:
    """Reject: only a pending candidate (an applied one is rolled back instead)."""
    if state.status == "applied":
        raise CandidateConflict(
            f"candidate {state.candidate_id} is applied: roll it back instead of rejecting it"
        )
    if state.status != "pending":
        raise CandidateConflict(
            f"candidate {state.candidate_id} is {state.status.replace('_', ' ')}, not pending"
        )
    return LearningCandidateRejected(candidate_id=state.candidate_id, by=by, reason=reason)


def may_roll_back(state: CandidateState) -> None:
    """Roll back: only an applied candidate."""
    if state.status != "applied":
        raise CandidateConflict(
            f"candidate {state.candidate_id} is {state.status.replace('_', ' ')}, not applied: "
            "only an applied candidate can be rolled back"
        )
