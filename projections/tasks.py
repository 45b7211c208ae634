"""The tasks view: one row per background task, folded from its ``task.*`` events, and the
queries the HTTP API and ``reel tasks`` read it with.

A row holds what the task's fold holds (``actors/tasks/state.py``; the tests compare the two
for every task): its state (:class:`events.task_lifecycle.TaskStatus`), attempts, the claim
and its lease, the last error, the result, and who cancelled it. Payloads and results are kept
as the journal stores them (redacted JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import msgspec

from events import Event, StoredEvent
from events.catalog import (
    TaskCancelled,
    TaskClaimed,
    TaskEnqueued,
    TaskExpired,
    TaskFailed,
    TaskHeartbeat,
    TaskSucceeded,
)
from events.task_lifecycle import TASK_KINDS, TaskStatus, status_after
from projections.pool import PooledReader, ReaderLimits
from projections.queries import page_sql

TASK_STATES: tuple[str, ...] = tuple(TaskStatus)
"""The states the view records (``tasks.state``), in life order."""

_json = msgspec.json.Encoder()
_decode = msgspec.json.Decoder()


class TaskRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One task as the view holds it (and as ``GET /v1/tasks/{id}`` returns it)."""

    task_id: str
    kind: str
    state: str
    """queued, running, retrying, succeeded, failed, expired or cancelled."""
    principal: str
    """Who enqueued it."""
    payload: Any
    dedupe_key: str | None
    enqueued_at_ms: int
    not_before_ms: int
    expires_at_ms: int | None
    max_attempts: int
    attempts: int
    """Attempts started so far (the last claim's attempt number)."""
    worker: str | None
    """Who holds (or last held) the claim: ``<node incarnation>.<n>``."""
    claimed_at_ms: int | None
    lease_until_ms: int | None
    """While running: the claim holds until then unless renewed."""
    heartbeat_at_ms: int | None
    """The last renewal of the claim (the claim itself or its last heartbeat)."""
    reclaims: int
    """Claims made after the previous holder's lease lapsed."""
    retry_at_ms: int | None
    """While retrying: when the next attempt may start."""
    error: str | None
    error_kind: str | None
    result: Any
    ended_at_ms: int | None
    cancelled_by: str | None
    cancel_reason: str | None


class TaskFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which tasks a list keeps (each set field must match its column exactly)."""

    state: str | None = None
    """One of :data:`TASK_STATES`."""
    kind: str | None = None


class TasksProjection:
    name: str = "tasks"
    version: int = 1
    tables: tuple[str, ...] = ("tasks",)
    kinds: frozenset[str] | None = TASK_KINDS
    ddl: str = """
    CREATE TABLE IF NOT EXISTS tasks(
        task_id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        principal TEXT NOT NULL,
        payload TEXT NOT NULL,
        dedupe_key TEXT,
        enqueued_at_ms INTEGER NOT NULL,
        not_before_ms INTEGER NOT NULL,
        expires_at_ms INTEGER,
        max_attempts INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        worker TEXT,
        claimed_at_ms INTEGER,
        lease_until_ms INTEGER,
        heartbeat_at_ms INTEGER,
        reclaims INTEGER NOT NULL DEFAULT 0,
        retry_at_ms INTEGER,
        error TEXT,
        error_kind TEXT,
        result TEXT NOT NULL DEFAULT 'null',
        ended_at_ms INTEGER,
        cancelled_by TEXT,
        cancel_reason TEXT
    );
    CREATE INDEX IF NOT EXISTS tasks_by_state ON tasks(state, task_id);
    CREATE INDEX IF NOT EXISTS tasks_by_kind ON tasks(kind, task_id);
    """

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        at = stored.recorded_at_ms
        status = status_after(event)
        ended = at if status is not None and status.terminal else None
        if isinstance(event, TaskEnqueued):
            conn.execute(
                "INSERT OR REPLACE INTO tasks(task_id, kind, state, principal, payload,"
                " dedupe_key, enqueued_at_ms, not_before_ms, expires_at_ms, max_attempts)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    event.task_id,
                    event.task_kind,
                    TaskStatus.QUEUED,
                    stored.principal,
                    _json.encode(event.payload).decode(),
                    event.dedupe_key,
                    at,
                    event.not_before_ms,
                    event.expires_at_ms,
                    event.max_attempts,
                ),
            )
        elif isinstance(event, TaskClaimed):
            conn.execute(
                "UPDATE tasks SET reclaims = reclaims + (state = ?), state = ?, attempts = ?,"
                " worker = ?, claimed_at_ms = ?, lease_until_ms = ?, heartbeat_at_ms = ?,"
                " retry_at_ms = NULL WHERE task_id = ?",
                (
                    TaskStatus.RUNNING,
                    TaskStatus.RUNNING,
                    event.attempt,
                    event.worker,
                    at,
                    event.lease_until_ms,
                    at,
                    event.task_id,
                ),
            )
        elif isinstance(event, TaskHeartbeat):
            conn.execute(
                "UPDATE tasks SET lease_until_ms = ?, heartbeat_at_ms = ? WHERE task_id = ?",
                (event.lease_until_ms, at, event.task_id),
            )
        elif isinstance(event, TaskSucceeded):
            conn.execute(
                "UPDATE tasks SET state = ?, result = ?, lease_until_ms = NULL, ended_at_ms = ?"
                " WHERE task_id = ?",
                (status, _json.encode(event.result).decode(), ended, event.task_id),
            )
        elif isinstance(event, TaskFailed):
            conn.execute(
                "UPDATE tasks SET state = ?, error = ?, error_kind = ?, retry_at_ms = ?,"
                " lease_until_ms = NULL, ended_at_ms = ? WHERE task_id = ?",
                (status, event.error, event.error_kind, event.retry_at_ms, ended, event.task_id),
            )
        elif isinstance(event, TaskExpired):
            conn.execute(
                "UPDATE tasks SET state = ?, lease_until_ms = NULL, ended_at_ms = ?"
                " WHERE task_id = ?",
                (status, ended, event.task_id),
            )
        elif isinstance(event, TaskCancelled):
            conn.execute(
                "UPDATE tasks SET state = ?, cancelled_by = ?, cancel_reason = ?,"
                " lease_until_ms = NULL, ended_at_ms = ? WHERE task_id = ?",
                (status, event.cancelled_by, event.reason, ended, event.task_id),
            )


class TasksView(PooledReader):
    """Typed queries over the tasks view (read-only connections of its own; safe from many
    threads)."""

    def __init__(self, path: Path, limits: ReaderLimits | None = None) -> None:
        super().__init__(path, limits)

    def _records(self, sql: str, args: tuple[Any, ...]) -> list[TaskRecord]:
        with self._borrow() as conn:
            cur = conn.execute(sql, args)
            try:
                names = [d[0] for d in cur.getdescription()]
            except apsw.ExecutionCompleteError:  # no rows: nothing to describe
                return []
            rows = cur.fetchall()
        out = []
        for row in rows:
            values: dict[str, Any] = dict(zip(names, row, strict=True))
            values["payload"] = _decode.decode(values["payload"])
            values["result"] = _decode.decode(values["result"])
            out.append(TaskRecord(**values))
        return out

    def tasks(
        self,
        where: TaskFilter | None = None,
        after: str | None = None,
        limit: int = 100,
        *,
        newest_first: bool = False,
    ) -> list[TaskRecord]:
        """Tasks by id (enqueue order) after the given id, narrowed by ``where``."""
        return self._records(
            *page_sql("tasks", "task_id", where or TaskFilter(), after, limit, newest_first)
        )

    def task(self, task_id: str) -> TaskRecord | None:
        rows = self._records("SELECT * FROM tasks WHERE task_id = ?", (task_id,))
        return rows[0] if rows else None

    def counts(self) -> dict[str, int]:
        """How many tasks are in each state."""
        with self._borrow() as conn:
            rows: list[Any] = conn.execute(
                "SELECT state, count(*) FROM tasks GROUP BY state"
            ).fetchall()
        return {str(state): int(n) for state, n in rows}
