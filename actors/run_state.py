"""The run state machine: ``accepted -> in_progress <-> awaiting_approval -> terminal``.

Terminal states: ``done``, ``failed``, ``cancelled``.

A run's status is a fold of its events; :func:`transition` is the only way it changes, and an
illegal change raises :class:`IllegalTransition` (a bug, never user input).
"""

from __future__ import annotations

from enum import StrEnum

from actors.errors import IllegalTransition
from events.catalog import (
    Event,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
)


class RunStatus(StrEnum):
    """Where a run is in its life."""

    ACCEPTED = "accepted"
    IN_PROGRESS = "in_progress"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Done, failed or cancelled: nothing follows."""
        return self in TERMINAL


TERMINAL = frozenset({RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED})

ALLOWED: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.ACCEPTED: frozenset({RunStatus.IN_PROGRESS, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.IN_PROGRESS: frozenset(
        {RunStatus.AWAITING_APPROVAL, RunStatus.DONE, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.AWAITING_APPROVAL: frozenset(
        {RunStatus.IN_PROGRESS, RunStatus.FAILED, RunStatus.CANCELLED}
    ),
    RunStatus.DONE: frozenset(),
    RunStatus.FAILED: frozenset(),
    RunStatus.CANCELLED: frozenset(),
}

_TARGET: dict[type[Event], RunStatus] = {
    RunStarted: RunStatus.IN_PROGRESS,
    RunAwaitingApproval: RunStatus.AWAITING_APPROVAL,
    RunResumed: RunStatus.IN_PROGRESS,
    RunCompleted: RunStatus.DONE,
    RunFailed: RunStatus.FAILED,
    RunCancelled: RunStatus.CANCELLED,
}


def transition(current: RunStatus, target: RunStatus) -> RunStatus:
    """``target`` if the machine allows ``current -> target``; raises otherwise."""
    if target not in ALLOWED[current]:
        raise IllegalTransition(f"run cannot go from {current} to {target}")
    return target


def apply(status: RunStatus | None, event: Event) -> RunStatus | None:
    """Fold one event into a run's status (events that do not change it leave it)."""
    if isinstance(event, RunAccepted):
        if status is not None:
            raise IllegalTransition(f"run accepted twice (status {status})")
        return RunStatus.ACCEPTED
    target = _TARGET.get(type(event))
    if target is None:
        return status
    if status is None:
        raise IllegalTransition(f"{type(event).__name__} before the run was accepted")
    return transition(status, target)
