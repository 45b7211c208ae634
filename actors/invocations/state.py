"""A tool invocation's state: a pure fold of its events (an :class:`actors.aggregate.Aggregate`:
``tool.proposed`` starts it).

Its events are on ``tool/<invocation_id>``, the stream its actor owns, except an operator's
decision made while the node was stopped: ``reel approvals approve|deny`` writes that to
``approval/<approval_id>``, a stream the CLI owns, and the invocation folds it like any other
decision when it starts again.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from msgspec.structs import replace

from actors.aggregate import fold
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)


def approval_stream(approval_id: str) -> str:
    """The stream an operator's offline decision on ``approval_id`` goes to."""
    return f"approval/{approval_id}"


class InvocationState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything an invocation knows, folded from its events."""

    invocation_id: str
    next_seq: int = 0
    """The ``stream_seq`` the invocation's next event on ``tool/<id>`` gets."""
    proposed: ToolProposed | None = None
    decided: ToolDecided | None = None
    request: ApprovalRequested | None = None
    requested_at_ms: int = 0
    resolution: ApprovalResolved | None = None
    completed: ToolCompleted | None = None

    @property
    def stream(self) -> str:
        return f"tool/{self.invocation_id}"

    @property
    def pending_approval(self) -> ApprovalRequested | None:
        """The approval request still waiting for a decision, if any."""
        if self.request is not None and self.resolution is None and self.completed is None:
            return self.request
        return None


def initial(first: Recorded) -> InvocationState | None:
    """The invocation its ``tool.proposed`` starts (None for any other record)."""
    event = first.event
    if not isinstance(event, ToolProposed) or first.stream != f"tool/{event.invocation_id}":
        return None
    return apply(InvocationState(invocation_id=event.invocation_id), first)


def apply(state: InvocationState, rec: Recorded) -> InvocationState:
    """Fold one event of the invocation: on its own stream, or an offline decision on
    ``approval/<id>`` (a record about another invocation changes nothing)."""
    event = rec.event
    mine = rec.stream == state.stream or rec.stream.startswith("approval/")
    if not mine or getattr(event, "invocation_id", None) != state.invocation_id:
        return state
    if rec.stream == state.stream:
        state = replace(state, next_seq=state.next_seq + 1)
    if isinstance(event, ToolProposed):
        return replace(state, proposed=event)
    if isinstance(event, ToolDecided):
        return replace(state, decided=event)
    if isinstance(event, ApprovalRequested):
        return replace(state, request=event, requested_at_ms=rec.at_ms)
    if isinstance(event, ApprovalResolved):
        return replace(state, resolution=event)
    if isinstance(event, ToolCompleted):
        return replace(state, completed=event)
    return state


def fold_invocations(tape: Iterable[Recorded]) -> dict[str, InvocationState]:
    """Every invocation of a run's tape, by invocation id, in the order they started."""
    from actors.invocations import state as tool_fold  # this module: the aggregate the fold takes

    tapes: dict[str, list[Recorded]] = {}
    for rec in tape:
        invocation_id = getattr(rec.event, "invocation_id", None)
        if isinstance(invocation_id, str) and rec.stream.startswith(("tool/", "approval/")):
            tapes.setdefault(invocation_id, []).append(rec)
    states = {invocation_id: fold(tool_fold, own) for invocation_id, own in tapes.items()}
    return {invocation_id: s for invocation_id, s in states.items() if s is not None}
