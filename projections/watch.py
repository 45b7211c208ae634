"""What the watchdog reads of a node: in-progress runs and when each last added to its tape,
pending approvals and when each expires, how far the views lag the journal, and the journal's
verdict from its last checkpoint (the check a node makes before it serves).

The records are plain values (the watchdog's checks in :mod:`actors.watchdog.checks` are pure
functions of them); :class:`WatchReads` reads them from views.db and the journal.

The views may lag the journal (that is one of the things watched), so nothing here trusts
them alone: rows the projector has not applied yet are read from the journal itself (through
its correlation index, per run), so a run that moved a moment ago is never taken for stalled,
nor an approval decided a moment ago for pending.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import apsw
import msgspec

from events import Journal, JournalReadPort, StoredEvent
from events.catalog import ApprovalResolved, TaskClaimed, TaskHeartbeat, kind_of
from events.lifecycle import STATUS_OF_KIND, RunStatus
from events.note import CheckpointNote
from events.sqlite.reader import JournalReader
from events.sqlite.verify import verify_recent
from events.task_lifecycle import TaskStatus, status_after, task_stream


class RunActivity(msgspec.Struct, frozen=True, kw_only=True):
    """A run in progress (not waiting for a human) and its latest tape entry."""

    run_id: str
    last_entry_ms: int
    """When the latest entry of the run's tape (its events and its tools') was committed."""


class PendingApproval(msgspec.Struct, frozen=True, kw_only=True):
    """An approval waiting for a human decision."""

    approval_id: str
    run_id: str
    expires_at_ms: int
    """When its time-out denies it (0: an approval recorded without one)."""


class TaskLease(msgspec.Struct, frozen=True, kw_only=True):
    """A running task's claim: until when it holds, and the holder's latest sign of life."""

    task_id: str
    lease_until_ms: int
    """The claim holds until then unless a heartbeat renews it; after that it has lapsed and
    the task queue reclaims it."""
    heartbeat_ms: int
    """Its latest ``task.heartbeat`` (or its claim, before the first heartbeat)."""
    holder: str = ""


class Lag(msgspec.Struct, frozen=True, kw_only=True):
    """The journal's committed head and what every view has applied."""

    committed: int
    applied: int
    error: str = ""
    """The projector's last failure ("" when none): it stopped applying because of it."""

    @property
    def events(self) -> int:
        return max(0, self.committed - self.applied)


class JournalVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """What verifying the journal from its last checkpoint found."""

    fault_position: int | None = None
    """The first bad position; None when the journal verifies."""
    fault: str = ""
    """The fault's kind and message."""
    rows: int = 0
    """Rows the check looked at."""

    @property
    def ok(self) -> bool:
        return self.fault_position is None


class Applied(Protocol):
    """The projector, as far as the watchdog is concerned."""

    @property
    def position(self) -> int: ...
    @property
    def error(self) -> BaseException | None: ...


class Committed(Protocol):
    @property
    def committed_position(self) -> int: ...


_IN_PROGRESS = (
    "SELECT r.run_id, coalesce(max(t.position), 0), coalesce(max(t.recorded_at_ms),"
    " r.accepted_at_ms) FROM runs r LEFT JOIN tape t ON t.run_id = r.run_id"
    " WHERE r.state = ? GROUP BY r.run_id ORDER BY r.run_id"
)
_RUNNING_TASKS = (
    "SELECT task_id, worker, heartbeat_at_ms, lease_until_ms FROM tasks WHERE state = ?"
    " ORDER BY task_id"
)
_PENDING = (
    "SELECT approval_id, run_id, expires_at_ms FROM approvals WHERE state = 'pending'"
    " ORDER BY approval_id"
)
RESOLVED = kind_of(ApprovalResolved)


class WatchReads:
    """:class:`actors.watchdog.actor.WatchdogPort` over views.db and the journal of a running
    node. One reading connection, used from the watchdog's thread."""

    def __init__(
        self,
        views_path: Path,
        journal: JournalReadPort,
        committed: Committed,
        projector: Applied,
        *,
        verify: Callable[[], JournalVerdict] | None = None,
        tasks: Callable[[], Sequence[TaskLease]] | None = None,
    ) -> None:
        """``verify``: the journal check (default :func:`verify_journal` when ``journal`` is a
        SQLite journal); ``tasks``: the running tasks (default: the tasks view, checked
        against the journal)."""
        self.views_path = views_path
        self.journal = journal
        self.committed = committed
        self.projector = projector
        self._verify = verify
        self._tasks = tasks
        self._conn: apsw.Connection | None = None
        self._lock = threading.Lock()

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._conn is None:
                self._conn = apsw.Connection(str(self.views_path), flags=apsw.SQLITE_OPEN_READONLY)
                self._conn.set_busy_timeout(5000)
            return self._conn.execute(sql, args).fetchall()

    def _unapplied(self, run_id: str, after: int) -> list[StoredEvent]:
        """The run's tape entries the views have not applied (none when they are caught up)."""
        if self.projector.position >= self.committed.committed_position:
            return []
        return self.journal.read_correlated(run_id, after_position=after)

    def runs_in_progress(self) -> list[RunActivity]:
        """Runs in progress now, each with its latest tape entry's commit time."""
        out = []
        for run_id, last_position, last_ms in self._query(_IN_PROGRESS, (RunStatus.IN_PROGRESS,)):
            status: RunStatus = RunStatus.IN_PROGRESS
            for stored in self._unapplied(run_id, int(last_position)):
                status = STATUS_OF_KIND.get(stored.kind, status)
                last_ms = stored.recorded_at_ms
            if status is RunStatus.IN_PROGRESS:
                out.append(RunActivity(run_id=run_id, last_entry_ms=int(last_ms)))
        return out

    def pending_approvals(self) -> list[PendingApproval]:
        """Approvals pending now (one decided but not yet in the views is left out)."""
        applied = self.projector.position
        out = []
        for approval_id, run_id, expires_at_ms in self._query(_PENDING):
            decided = any(
                stored.kind == RESOLVED
                and getattr(stored.decode(), "approval_id", None) == approval_id
                for stored in self._unapplied(run_id, applied)
            )
            if not decided:
                out.append(
                    PendingApproval(
                        approval_id=approval_id, run_id=run_id, expires_at_ms=int(expires_at_ms)
                    )
                )
        return out

    def lag(self) -> Lag:
        error = self.projector.error
        return Lag(
            committed=self.committed.committed_position,
            applied=self.projector.position,
            error=f"{type(error).__name__}: {error}" if error is not None else "",
        )

    def verify_journal(self) -> JournalVerdict:
        """The journal's verdict from its last checkpoint (and, for the node's own journal,
        what the full walk it runs while serving found)."""
        if self._verify is not None:
            return self._verify()
        journal = self.journal
        if isinstance(journal, Journal):
            if journal.tampered is not None:
                found = journal.tampered
                return JournalVerdict(fault_position=found.position, fault=str(found))
            key = journal.node_key
            witness = journal.witness
            return verify_journal(
                journal,
                public_key=key.public_key if key is not None else None,
                # read before the rows: every note names a checkpoint already committed
                witness=witness.notes() if witness is not None else None,
            )
        if isinstance(journal, JournalReader):
            return verify_journal(journal)
        return JournalVerdict()

    def task_leases(self) -> Sequence[TaskLease] | None:
        """Running tasks and their claims (None: these views have no tasks table). Each task's
        latest event is read from the journal (two indexed lookups): a heartbeat the views
        have not applied yet still counts, and a task that ended meanwhile is left out."""
        if self._tasks is not None:
            return self._tasks()
        try:
            rows = self._query(_RUNNING_TASKS, (TaskStatus.RUNNING,))
        except apsw.SQLError:
            return None
        out = []
        for task_id, worker, heartbeat_ms, lease_until_ms in rows:
            stream = task_stream(task_id)
            latest = self.journal.read_stream(
                stream, after_seq=self.journal.stream_next_seq(stream) - 2
            )
            if latest:
                stored = latest[-1]
                event = stored.decode()
                status = status_after(event)
                if status is not None and status is not TaskStatus.RUNNING:
                    continue
                if isinstance(event, TaskClaimed | TaskHeartbeat):
                    heartbeat_ms, lease_until_ms = stored.recorded_at_ms, event.lease_until_ms
                if isinstance(event, TaskClaimed):
                    worker = event.worker
            out.append(
                TaskLease(
                    task_id=task_id,
                    lease_until_ms=int(lease_until_ms or 0),
                    heartbeat_ms=int(heartbeat_ms or 0),
                    holder=worker or "",
                )
            )
        return out

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def verify_journal(
    journal: JournalReader,
    *,
    public_key: bytes | None = None,
    witness: Sequence[CheckpointNote] | None = None,
) -> JournalVerdict:
    """:func:`events.sqlite.verify.verify_recent` (what a node checks before it serves: every
    checkpoint's neighbourhood and every row since the last one), as a verdict. Cheap at any
    size: it re-hashes only the rows after the last checkpoint."""
    report = verify_recent(journal, trusted_public_key=public_key, witness=witness)
    fault = report.fault
    if fault is None:
        return JournalVerdict(rows=report.events)
    return JournalVerdict(
        fault_position=fault.position, fault=f"{fault.kind}: {fault.message}", rows=report.events
    )
