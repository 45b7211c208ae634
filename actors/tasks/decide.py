"""What happens to a task next, and which event each step appends: pure functions of the
folded :class:`actors.tasks.state.TaskState` and the time.

:func:`next_action` names the one thing due for a task at ``now_ms``. The dispatcher asks it
for every task it knows (after start-up, after each change, when a timer it set fires); the
worker asks the event builders below at the moment it appends, against the state it folded
last, so a decision taken a moment earlier by someone else is decided again, never trusted.

Rules (docs/tasks.md):

* an attempt starts only at or after the task's due time (``not_before_ms``, then each
  ``retry_at_ms``) and only before ``expires_at_ms``: an expired task never runs;
* after failed attempt ``n`` (of ``max_attempts``) the next is due
  ``min(backoff_base_ms * 2 ** (n - 1), backoff_max_ms)`` later: deterministic, no jitter, so
  the schedule can be read off the journal and tested exactly;
* a claim whose lease lapsed (no heartbeat: its worker or node stopped) is reclaimed as the
  next attempt; on the last attempt the task fails ``lapsed`` instead;
* a terminal task takes no event: a second success (or any event) is never decided.
"""

from __future__ import annotations

import msgspec

from actors.errors import Conflict, NotFound
from actors.tasks.state import TaskState
from events.catalog import (
    Event,
    TaskCancelled,
    TaskClaimed,
    TaskErrorKind,
    TaskExpired,
    TaskFailed,
    TaskHeartbeat,
    TaskSucceeded,
)
from events.task_lifecycle import TaskStatus

ERROR_MAX_CHARS = 2_000
"""A failure's ``error`` text is cut to this many characters."""
LAPSED = "the claim's lease lapsed on the last attempt: its worker or node stopped"


class UnknownTask(NotFound):
    """No task has that id."""


class TaskNotActive(Conflict):
    """The task already ended (succeeded, failed, expired or cancelled)."""


# --- what is due -----------------------------------------------------------------------------


class Wait(msgspec.Struct, frozen=True):
    """Nothing now; look again at ``until_ms`` (a due time, an expiry or a lease's end)."""

    until_ms: int


class Claim(msgspec.Struct, frozen=True):
    """Start attempt ``attempt`` (a reclaim when the previous claim's lease lapsed)."""

    attempt: int
    reclaim: bool = False


class Expire(msgspec.Struct, frozen=True):
    """``expires_at_ms`` passed before the next attempt could start: append ``task.expired``."""


class GiveUp(msgspec.Struct, frozen=True):
    """The last attempt's lease lapsed: append a final ``task.failed`` (``lapsed``)."""


class Done(msgspec.Struct, frozen=True):
    """Terminal: nothing follows."""


Action = Wait | Claim | Expire | GiveUp | Done


def next_action(state: TaskState, now_ms: int) -> Action:
    """The one thing due for the task at ``now_ms``."""
    status = state.status
    if status.terminal:
        return Done()
    expires = state.expires_at_ms
    if status is TaskStatus.RUNNING:
        lease = state.lease_until_ms or 0
        if now_ms < lease:
            return Wait(lease)
        if expires is not None and now_ms >= expires:
            return Expire()
        if state.attempt >= state.max_attempts:
            return GiveUp()
        return Claim(state.attempt + 1, reclaim=True)
    if expires is not None and now_ms >= expires:
        return Expire()
    due = state.due_ms
    if now_ms < due:
        return Wait(due if expires is None else min(due, expires))
    return Claim(state.attempt + 1)


def backoff_ms(state: TaskState, attempt: int) -> int:
    """How long after failed attempt ``attempt`` (from 1) the next may start."""
    exponent = min(max(attempt - 1, 0), 62)
    return int(min(state.backoff_base_ms * (2**exponent), state.backoff_max_ms))


# --- events ----------------------------------------------------------------------------------


def claimed(state: TaskState, now_ms: int, worker: str, lease_ms: int) -> TaskClaimed | None:
    """``task.claimed`` for the next attempt when one is due now, else ``None``."""
    action = next_action(state, now_ms)
    if not isinstance(action, Claim):
        return None
    return TaskClaimed(
        task_id=state.task_id,
        attempt=action.attempt,
        worker=worker,
        lease_until_ms=now_ms + lease_ms,
    )


def holds(state: TaskState, worker: str, attempt: int) -> bool:
    """Whether ``worker`` still holds the task's claim for ``attempt``."""
    return (
        state.status is TaskStatus.RUNNING and state.worker == worker and state.attempt == attempt
    )


def heartbeat(
    state: TaskState, worker: str, attempt: int, now_ms: int, lease_ms: int
) -> TaskHeartbeat | None:
    """``task.heartbeat`` renewing the lease, while ``worker`` still holds ``attempt``."""
    if not holds(state, worker, attempt):
        return None
    return TaskHeartbeat(task_id=state.task_id, attempt=attempt, lease_until_ms=now_ms + lease_ms)


def succeeded(
    state: TaskState, worker: str, attempt: int, result: object, duration_ms: int
) -> TaskSucceeded | None:
    """``task.succeeded``, while ``worker`` still holds ``attempt`` (else the result is
    dropped: the task was cancelled, or reclaimed after this worker's lease lapsed)."""
    if not holds(state, worker, attempt):
        return None
    return TaskSucceeded(
        task_id=state.task_id, attempt=attempt, result=result, duration_ms=duration_ms
    )


def failed(
    state: TaskState,
    worker: str,
    attempt: int,
    error: str,
    now_ms: int,
    *,
    error_kind: TaskErrorKind = "error",
    retryable: bool = True,
    duration_ms: int = 0,
) -> TaskFailed | None:
    """``task.failed`` for ``attempt``, with the next attempt's time when one is left and
    retrying can help (``retryable``), else final."""
    if not holds(state, worker, attempt):
        return None
    retry_at = None
    if retryable and attempt < state.max_attempts:
        retry_at = now_ms + backoff_ms(state, attempt)
    return TaskFailed(
        task_id=state.task_id,
        attempt=attempt,
        error=error[:ERROR_MAX_CHARS],
        error_kind=error_kind,
        retry_at_ms=retry_at,
        duration_ms=duration_ms,
    )


def settled(state: TaskState, now_ms: int) -> Event | None:
    """What the dispatcher appends without running anything: ``task.expired`` when the task
    expired before its next attempt, a final ``task.failed`` when its last attempt's lease
    lapsed; else ``None``."""
    action = next_action(state, now_ms)
    if isinstance(action, Expire):
        return TaskExpired(
            task_id=state.task_id,
            expires_at_ms=state.expires_at_ms or 0,
            attempts=state.attempt,
        )
    if isinstance(action, GiveUp):
        return TaskFailed(
            task_id=state.task_id, attempt=state.attempt, error=LAPSED, error_kind="lapsed"
        )
    return None


def cancelled(state: TaskState, by: str, reason: str) -> TaskCancelled:
    """``task.cancelled`` by ``by``; a task that already ended is :class:`TaskNotActive`."""
    if state.status.terminal:
        raise TaskNotActive(f"task {state.task_id} already ended ({state.status})")
    attempt = state.attempt if state.status is TaskStatus.RUNNING else 0
    return TaskCancelled(task_id=state.task_id, cancelled_by=by, reason=reason, attempt=attempt)
