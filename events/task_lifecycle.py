"""What the catalog knows about a task's life: its states and which event moves it where.

One home for this knowledge, as :mod:`events.lifecycle` is for runs: the task fold
(``actors/tasks/state.py``) and the tasks view (``projections/tasks.py``) both import it, so a
view row and a folded state can never disagree on a task's state.

    queued -> running -> succeeded
                 |  \\-> retrying -> running -> ...   (a failed attempt with attempts left)
                 |  \\-> failed                        (the last attempt, or no retry helps)
                 \\-> running                          (reclaimed: its lease lapsed)
    queued | retrying | running -> cancelled
    queued | retrying | running (lease lapsed) -> expired
"""

from __future__ import annotations

from enum import StrEnum

from events.catalog import (
    Event,
    TaskCancelled,
    TaskClaimed,
    TaskEnqueued,
    TaskExpired,
    TaskFailed,
    TaskHeartbeat,
    TaskSucceeded,
    kind_of,
    kinds_of,
)


class TaskStatus(StrEnum):
    """Where a task is in its life (the tasks view stores the value)."""

    QUEUED = "queued"
    """Enqueued, no attempt started yet (it may wait for ``not_before_ms``)."""
    RUNNING = "running"
    """Claimed by a worker (whose lease may have lapsed: then it is reclaimed)."""
    RETRYING = "retrying"
    """An attempt failed and another waits for its ``retry_at_ms``."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """Succeeded, failed, expired or cancelled: nothing follows."""
        return self in TERMINAL_TASK_STATUSES


TERMINAL_TASK_STATUSES = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.EXPIRED, TaskStatus.CANCELLED}
)

ENDING_KINDS: tuple[str, ...] = kinds_of(TaskSucceeded, TaskExpired, TaskCancelled)
"""Kinds after which a task has always ended (``task.failed`` ends it only without a retry):
a task stream holding one is never read to find the open tasks."""

TASK_EVENTS: tuple[type[Event], ...] = (
    TaskEnqueued,
    TaskClaimed,
    TaskHeartbeat,
    TaskSucceeded,
    TaskFailed,
    TaskExpired,
    TaskCancelled,
)
"""Every event of a task's stream."""

TASK_KINDS: frozenset[str] = frozenset(kind_of(c) for c in TASK_EVENTS)
TASK_STREAM_PREFIX = "task/"


def task_stream(task_id: str) -> str:
    """The stream of a task's events."""
    return f"{TASK_STREAM_PREFIX}{task_id}"


def status_after(event: Event) -> TaskStatus | None:
    """The status a task is in right after ``event`` (``None``: the event leaves it as it was,
    or is not a task event)."""
    if isinstance(event, TaskEnqueued):
        return TaskStatus.QUEUED
    if isinstance(event, TaskClaimed):
        return TaskStatus.RUNNING
    if isinstance(event, TaskSucceeded):
        return TaskStatus.SUCCEEDED
    if isinstance(event, TaskFailed):
        return TaskStatus.FAILED if event.retry_at_ms is None else TaskStatus.RETRYING
    if isinstance(event, TaskExpired):
        return TaskStatus.EXPIRED
    if isinstance(event, TaskCancelled):
        return TaskStatus.CANCELLED
    return None
