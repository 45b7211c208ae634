"""The run state machine: ``accepted -> in_progress <-> awaiting_approval -> terminal``.

Terminal states: ``done``, ``failed``, ``cancelled``.

A run's status is a fold of its events; :func:`transition` is the only way it changes, and an
illegal change raises :class:`IllegalTransition` (a bug, never user input).
"""

from __future__ import annotations

from actors.errors import IllegalTransition
from events.catalog import Event, RunAccepted
from events.lifecycle import STATUS_OF, TERMINAL_STATUSES, RunStatus

__all__ = ["ALLOWED", "TERMINAL", "RunStatus", "apply", "transition"]

TERMINAL = TERMINAL_STATUSES

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
    target = STATUS_OF.get(type(event))
    if target is None:
        return status
    if status is None:
        raise IllegalTransition(f"{type(event).__name__} before the run was accepted")
    return transition(status, target)
