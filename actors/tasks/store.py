"""Reading and writing task streams: enqueue, load, and the one write path every writer takes.

:func:`write` is how anything changes a task: fold the stream (the caller's state), let a
decider of :mod:`actors.tasks.decide` say which event is due, append it at the seq the state
expects, fold it. When the journal refuses the append (``ConcurrencyConflict``: someone else
appended first), the stream is read again and the decider asked again, so a decision is
always taken against every event before it. Two workers claiming one task, a cancel racing a
success, a late result after a reclaim: one append wins, the other decides again and finds
nothing to do.

The journal redacts each event as it stores it and hands the stored events back
(``AppendResult.events``); the writer folds those, so its state is exactly what a later reader
of the journal folds (:mod:`actors.stream`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Container
from typing import Any

import msgspec

from actors.aggregate import fold
from actors.errors import InvalidCommand
from actors.stream import Recorded, recorded
from actors.tasks import state as task_state
from actors.tasks.state import TaskState, apply
from events import (
    AppendResult,
    ConcurrencyConflict,
    Event,
    JournalPort,
    JournalReadPort,
    new_id,
)
from events.catalog import TASK_KIND, TaskEnqueued, kind_of
from events.fields import ID
from events.redaction.redact import looks_secret
from events.task_lifecycle import ENDING_KINDS, TASK_KINDS, TASK_STREAM_PREFIX, task_stream

CONFLICT_RETRIES = 32
"""How often :func:`write` reads the stream again after a refused append before it gives up
(each retry means another writer appended in between: a handful at most in practice)."""
PAYLOAD_MAX_BYTES = 256 * 1024
"""A task's payload, as JSON, is at most this large (refused with the field named)."""
MAX_ATTEMPTS_CAP = 100
IDEMPOTENCY_PREFIX = "task:"
"""``dedupe_key`` is the enqueue append's idempotency key under this prefix."""

Decide = Callable[[TaskState], Event | None]


class TaskTicket(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to an enqueue: the task exists and is durable."""

    task_id: str
    duplicate: bool = False
    """True when ``dedupe_key`` named a task enqueued before: this is that task."""


def now_ms() -> int:
    """Wall-clock milliseconds: leases and due times are absolute, across restarts. The clock
    of a node alone; a node of a cluster decides on the database's (``TaskQueue(clock=)``)."""
    return time.time_ns() // 1_000_000


def load_task(reader: JournalReadPort, task_id: str) -> TaskState | None:
    """A task folded from its stream (``None``: no such task)."""
    return fold(task_state, recorded(reader.read_stream(task_stream(task_id))))


def load_tasks(reader: JournalReadPort) -> dict[str, TaskState]:
    """Every task of the journal, folded, in enqueue order (one scan of the task kinds)."""
    streams: dict[str, list[Any]] = {}
    for row in reader.events_of_kinds(tuple(sorted(TASK_KINDS))):
        if row.stream.startswith(TASK_STREAM_PREFIX):
            streams.setdefault(row.stream, []).append(row)
    out: dict[str, TaskState] = {}
    for rows in streams.values():
        state = fold(task_state, recorded(rows))
        if state is not None:
            out[state.task_id] = state
    return out


def load_open_tasks(
    reader: JournalReadPort, shards: Container[int] | None = None
) -> dict[str, TaskState]:
    """Every task not ended, folded, in enqueue order: the task streams holding none of the
    kinds that always end a task (found through the kind index; a ``task.failed`` one is
    folded to see whether a retry follows), each read through the stream index. ``shards``:
    only the tasks whose streams are in these (a cluster node acquiring them)."""
    out: dict[str, TaskState] = {}
    for enqueued in reader.open_events(kind_of(TaskEnqueued), ENDING_KINDS, "stream"):
        if not enqueued.stream.startswith(TASK_STREAM_PREFIX):
            continue
        if shards is not None and enqueued.shard not in shards:
            continue
        state = fold(task_state, recorded(reader.read_stream(enqueued.stream)))
        if state is not None and not state.status.terminal:
            out[state.task_id] = state
    return out


def write(journal: JournalPort, state: TaskState, decide: Decide, *, principal: str) -> TaskState:
    """Append what ``decide`` says is due for the task (nothing when it says ``None``) and
    return the state after it; on a refused append, read the stream and decide again.

    ``decide`` may raise (a cancel of an ended task): nothing is appended and it propagates.
    """
    for _ in range(CONFLICT_RETRIES):
        event = decide(state)
        if event is None:
            return state
        try:
            result = journal.append(
                state.stream, [event], expected_seq=state.next_seq, principal=principal
            )
        except ConcurrencyConflict:
            fresh = load_task(journal, state.task_id)
            if fresh is None:  # cannot happen: the stream had an enqueue to fold
                raise
            state = fresh
            continue
        stored = result.events[0]  # as the journal stored it (redacted): what a reader folds
        return apply(state, Recorded(stored, state.stream, result.recorded_at_ms, principal))
    raise ConcurrencyConflict(state.stream, state.next_seq, journal.stream_next_seq(state.stream))


def enqueue(
    journal: JournalPort,
    kind: str,
    payload: Any = None,
    *,
    principal: str = "node",
    delay_s: float = 0.0,
    not_before_ms: int | None = None,
    expires_in_s: float | None = None,
    expires_at_ms: int | None = None,
    max_attempts: int = 3,
    backoff_base_s: float = 1.0,
    backoff_max_s: float = 300.0,
    dedupe_key: str | None = None,
    causation_id: str | None = None,
    clock: Callable[[], int] = now_ms,
) -> tuple[TaskTicket, TaskState | None]:
    """Append ``task.enqueued`` and return the ticket and the task's state (``None`` for a
    duplicate: the task enqueued with that ``dedupe_key`` before, which the caller may load).

    The task may start ``delay_s`` from now (or at ``not_before_ms``) and expires
    ``expires_in_s`` from now (or at ``expires_at_ms``; neither: never), now by ``clock``
    (epoch ms). Bad input is :class:`actors.InvalidCommand` naming the field; nothing is
    written then."""
    event = enqueued_event(
        kind,
        payload,
        delay_s=delay_s,
        not_before_ms=not_before_ms,
        expires_in_s=expires_in_s,
        expires_at_ms=expires_at_ms,
        max_attempts=max_attempts,
        backoff_base_s=backoff_base_s,
        backoff_max_s=backoff_max_s,
        dedupe_key=dedupe_key,
        clock=clock,
    )
    return append_enqueued(journal, event, principal, causation_id)


def append_enqueued(
    journal: JournalPort, event: TaskEnqueued, principal: str, causation_id: str | None
) -> tuple[TaskTicket, TaskState | None]:
    """Append ``event`` (made by :func:`enqueued_event`) as its task's first event, and
    return what :func:`enqueue` does."""
    result = journal.append(
        task_stream(event.task_id),
        [event],
        expected_seq=0,
        principal=principal,
        causation_id=causation_id,
        idempotency_key=idempotency_key(event.dedupe_key),
    )
    return enqueued(event, result, principal)


def idempotency_key(dedupe_key: str | None) -> str | None:
    """The enqueue append's idempotency key for ``dedupe_key``."""
    return None if dedupe_key is None else IDEMPOTENCY_PREFIX + dedupe_key


def enqueued(
    event: TaskEnqueued, result: AppendResult, principal: str
) -> tuple[TaskTicket, TaskState | None]:
    """The ticket and the folded state of ``event``'s committed append (``result``); the
    state is ``None`` for a duplicate (the ticket names the task enqueued before)."""
    if result.duplicate:
        first = result.stream.removeprefix(TASK_STREAM_PREFIX)
        return TaskTicket(task_id=first, duplicate=True), None
    stored = result.events[0]  # as the journal stored it (redacted): what a reader folds
    stream = task_stream(event.task_id)
    return TaskTicket(task_id=event.task_id), task_state.initial(
        Recorded(stored, stream, result.recorded_at_ms, principal)
    )


def enqueued_event(
    kind: str,
    payload: Any = None,
    *,
    delay_s: float = 0.0,
    not_before_ms: int | None = None,
    expires_in_s: float | None = None,
    expires_at_ms: int | None = None,
    max_attempts: int = 3,
    backoff_base_s: float = 1.0,
    backoff_max_s: float = 300.0,
    dedupe_key: str | None = None,
    clock: Callable[[], int] = now_ms,
) -> TaskEnqueued:
    """The ``task.enqueued`` :func:`enqueue` appends, its input checked (as :func:`enqueue`
    says); appends nothing."""
    problem = TASK_KIND.problem(kind, looks_secret) if isinstance(kind, str) else "must be text"
    if problem is not None:
        raise InvalidCommand("kind", problem)
    try:
        size = len(msgspec.json.encode(payload))
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidCommand("payload", f"must be JSON ({exc})") from None
    if size > PAYLOAD_MAX_BYTES:
        raise InvalidCommand("payload", f"is {size} bytes as JSON; at most {PAYLOAD_MAX_BYTES}")
    if dedupe_key is not None and (why := ID.problem(dedupe_key, looks_secret)) is not None:
        raise InvalidCommand("dedupe_key", why)
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidCommand("max_attempts", "must be an integer")
    if not 1 <= max_attempts <= MAX_ATTEMPTS_CAP:
        raise InvalidCommand("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_CAP}")
    _seconds("delay_s", delay_s)
    _seconds("backoff_base_s", backoff_base_s)
    _seconds("backoff_max_s", backoff_max_s)
    now = clock()
    start_ms = not_before_ms if not_before_ms is not None else now + round(delay_s * 1000)
    _millis("not_before_ms", start_ms)
    expires = expires_at_ms
    if expires is None and expires_in_s is not None:
        _seconds("expires_in_s", expires_in_s)
        expires = now + round(expires_in_s * 1000)
    if expires is not None:
        _millis("expires_at_ms", expires)
        if expires <= start_ms:
            raise InvalidCommand("expires_at_ms", "must be after the time the task may start")
    return TaskEnqueued(
        task_id=new_id(),
        task_kind=kind,
        payload=payload,
        not_before_ms=start_ms,
        expires_at_ms=expires,
        max_attempts=max_attempts,
        backoff_base_ms=round(backoff_base_s * 1000),
        backoff_max_ms=round(backoff_max_s * 1000),
        dedupe_key=dedupe_key,
    )


def _seconds(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidCommand(field, "must be a number of seconds")
    if value < 0:
        raise InvalidCommand(field, "must not be negative")


def _millis(field: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 62:
        raise InvalidCommand(field, "must be a time in milliseconds since the epoch")
