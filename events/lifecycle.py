"""What the catalog knows about a run's life: its states, which kinds move it, which kinds end it.

One home for this knowledge: the run actor's fold, the runs view, the tape followers, the run
state log and the gRPC mapping all import it, so adding a terminal kind (or renaming a state)
is a change here and nowhere else.

    accepted -> in_progress <-> awaiting_approval -> done | failed | cancelled
"""

from __future__ import annotations

from enum import StrEnum

from events.catalog import (
    Event,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    kind_of,
)

REFERENCE_CALL_PREFIX = "ref-"
"""Call ids of the tool calls a run makes to read the files and URLs its message references
(``@file:``, ``@url:``): they are not the model's calls, so no count of a run's tool calls
(``max_tool_calls``, ``run.completed``, the runs view) includes them."""


class RunStatus(StrEnum):
    """Where a run is in its life (the runs view stores the value)."""

    ACCEPTED = "accepted"
    IN_PROGRESS = "in_progress"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Done, failed or cancelled: nothing follows."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})

RunEnd = RunCompleted | RunFailed | RunCancelled
"""The events that end a run: exactly one is the last event of every run's tape."""

TERMINAL_EVENTS: tuple[type[RunEnd], ...] = (RunCompleted, RunFailed, RunCancelled)

TERMINAL_KINDS: frozenset[str] = frozenset(kind_of(c) for c in TERMINAL_EVENTS)
"""The kinds that end a run's tape."""

STATUS_OF: dict[type[Event], RunStatus] = {
    RunAccepted: RunStatus.ACCEPTED,
    RunStarted: RunStatus.IN_PROGRESS,
    RunAwaitingApproval: RunStatus.AWAITING_APPROVAL,
    RunResumed: RunStatus.IN_PROGRESS,
    RunCompleted: RunStatus.DONE,
    RunFailed: RunStatus.FAILED,
    RunCancelled: RunStatus.CANCELLED,
}
"""The status a run is in right after an event of each class (classes not listed leave it)."""

STATUS_OF_KIND: dict[str, RunStatus] = {kind_of(c): s for c, s in STATUS_OF.items()}
""":data:`STATUS_OF` by dotted kind, for code that reads envelopes without decoding."""


def is_terminal(kind: str) -> bool:
    """Whether an event of ``kind`` ends its run."""
    return kind in TERMINAL_KINDS
