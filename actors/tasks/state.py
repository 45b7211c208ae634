"""A task's state: a pure fold of the events on its stream ``task/<id>`` (an
:class:`actors.aggregate.Aggregate`: ``task.enqueued`` starts it).

Every writer of a task's stream (the enqueuer, the worker that claims it, its heartbeats, a
canceller, the dispatcher that expires it) folds the stream with :func:`apply`, decides with
:mod:`actors.tasks.decide`, and appends at ``state.next_seq``. Start-up folds the same records
read back from the journal (``fold(actors.tasks.state, records)``), so a task after a restart is
the task before it.

Inputs are :class:`actors.stream.Recorded` events: as stored (redacted), with their commit
times. The tasks view folds the same events into the same values (``tests/actors`` checks
that a view row equals :func:`actors.tasks.queue.record_of` of the fold).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import replace

from actors.stream import Recorded
from events.catalog import (
    TaskCancelled,
    TaskClaimed,
    TaskEnqueued,
    TaskFailed,
    TaskHeartbeat,
    TaskSucceeded,
)
from events.task_lifecycle import TaskStatus, status_after, task_stream


class TaskState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a task's stream says about it."""

    task_id: str
    kind: str
    payload: Any
    """As stored (redacted): what the handler receives."""
    principal: str
    """Who enqueued it."""
    enqueued_at_ms: int
    not_before_ms: int
    expires_at_ms: int | None
    max_attempts: int
    backoff_base_ms: int
    backoff_max_ms: int
    dedupe_key: str | None = None
    status: TaskStatus = TaskStatus.QUEUED
    next_seq: int = 1
    """The ``stream_seq`` the stream's next event gets (``task.enqueued`` is seq 0)."""
    attempt: int = 0
    """The last attempt claimed (from 1; 0: none yet)."""
    worker: str | None = None
    """Who holds (or last held) the claim."""
    claimed_at_ms: int | None = None
    lease_until_ms: int | None = None
    heartbeat_at_ms: int | None = None
    """When the claim was last renewed (its claim, or its last heartbeat)."""
    reclaims: int = 0
    """Claims made after a previous holder's lease lapsed."""
    retry_at_ms: int | None = None
    error: str | None = None
    """The last failure (kept when a later attempt succeeds: it is history)."""
    error_kind: str | None = None
    result: Any = None
    ended_at_ms: int | None = None
    cancelled_by: str | None = None
    cancel_reason: str | None = None

    @property
    def stream(self) -> str:
        return task_stream(self.task_id)

    @property
    def due_ms(self) -> int:
        """When the next attempt may start (while queued or retrying)."""
        return max(self.not_before_ms, self.retry_at_ms or 0)


def start(event: TaskEnqueued, principal: str, at_ms: int) -> TaskState:
    """The state right after ``task.enqueued``."""
    return TaskState(
        task_id=event.task_id,
        kind=event.task_kind,
        payload=event.payload,
        principal=principal,
        enqueued_at_ms=at_ms,
        not_before_ms=event.not_before_ms,
        expires_at_ms=event.expires_at_ms,
        max_attempts=event.max_attempts,
        backoff_base_ms=event.backoff_base_ms,
        backoff_max_ms=event.backoff_max_ms,
        dedupe_key=event.dedupe_key,
    )


def initial(first: Recorded) -> TaskState | None:
    """The task its ``task.enqueued`` starts (None for any other record)."""
    event = first.event
    if not isinstance(event, TaskEnqueued) or first.stream != task_stream(event.task_id):
        return None
    return start(event, first.principal, first.at_ms)


def apply(state: TaskState, rec: Recorded) -> TaskState:
    """Fold one event of the task's stream (after ``task.enqueued``; a record of another
    stream changes nothing).

    The writers never append after a terminal event (each appends at the seq its fold
    expects, so it has seen every event before its own); the fold takes the stream as it is."""
    if rec.stream != state.stream:
        return state
    event, at = rec.event, rec.at_ms
    before = state.status
    state = replace(state, next_seq=state.next_seq + 1)
    status = status_after(event)
    if status is not None:
        state = replace(state, status=status)
        if status.terminal:
            state = replace(state, ended_at_ms=at)
    if isinstance(event, TaskClaimed):
        return replace(
            state,
            attempt=event.attempt,
            worker=event.worker,
            claimed_at_ms=at,
            lease_until_ms=event.lease_until_ms,
            heartbeat_at_ms=at,
            retry_at_ms=None,
            reclaims=state.reclaims + (before is TaskStatus.RUNNING),
        )
    if isinstance(event, TaskHeartbeat):
        return replace(state, lease_until_ms=event.lease_until_ms, heartbeat_at_ms=at)
    if isinstance(event, TaskSucceeded):
        return replace(state, result=event.result, lease_until_ms=None)
    if isinstance(event, TaskFailed):
        return replace(
            state,
            error=event.error,
            error_kind=event.error_kind,
            retry_at_ms=event.retry_at_ms,
            lease_until_ms=None,
        )
    if isinstance(event, TaskCancelled):
        return replace(
            state,
            cancelled_by=event.cancelled_by,
            cancel_reason=event.reason,
            lease_until_ms=None,
        )
    return replace(state, lease_until_ms=None) if status is not None else state
