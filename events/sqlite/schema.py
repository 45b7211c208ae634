"""The journal file's schema, and opening a file safely.

A reel journal is an SQLite database whose ``application_id`` is :data:`APPLICATION_ID` and whose
``user_version`` is the schema version. Rows of ``events`` are append-only (triggers refuse
updates and deletes: a guard against accidents; tampering is what verify is for).

Version 2 keeps signed checkpoints in the chain itself (``journal.checkpoint`` rows on the
``journal`` stream); version 1 kept them in a table beside it, where deleting them went
unnoticed. A version 1 file is refused rather than silently trusted.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import apsw

from events.catalog import RunAccepted, TaskEnqueued, kind_of
from events.errors import JournalUnavailable, NotAJournal, SchemaTooNew, SchemaTooOld
from events.lifecycle import TERMINAL_KINDS
from events.task_lifecycle import ENDING_KINDS

APPLICATION_ID = 0x7265656C  # "reel"
SCHEMA_VERSION = 2

DDL = """
CREATE TABLE events(
    position INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL,
    stream TEXT NOT NULL,
    stream_seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    version INTEGER NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    principal TEXT NOT NULL,
    correlation_id TEXT,
    causation_id TEXT,
    payload BLOB NOT NULL,
    payload_sha256 BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE UNIQUE INDEX events_by_stream ON events(stream, stream_seq);
CREATE INDEX events_by_correlation ON events(correlation_id, position)
    WHERE correlation_id IS NOT NULL;
CREATE TABLE idempotency(
    key TEXT PRIMARY KEY,
    stream TEXT NOT NULL,
    first_position INTEGER NOT NULL,
    last_position INTEGER NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'journal rows are append-only'); END;
CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'journal rows are append-only'); END;
"""

OPEN_KINDS: tuple[str, ...] = tuple(
    sorted({kind_of(RunAccepted), *TERMINAL_KINDS, kind_of(TaskEnqueued), *ENDING_KINDS})
)
"""The kinds that open and end runs and tasks: what ``events_open`` holds."""

OPEN_WHERE = "kind IN (" + ", ".join(f"'{kind}'" for kind in OPEN_KINDS) + ")"
"""The partial index's condition, which a query repeats word for word for SQLite to use it."""

INDEXES = (
    "CREATE INDEX IF NOT EXISTS events_by_kind ON events(kind, position)",
    f"CREATE INDEX IF NOT EXISTS events_open ON events(kind, correlation_id, stream) "
    f"WHERE {OPEN_WHERE}",
)
"""Indexes created whenever a journal is opened for writing, so a file made before them gets
them too (once: building one over a million rows takes seconds). Reads only: they change
neither the rows nor the chain. ``events_by_kind``: start-up state (tokens, unfinished runs,
grants, tasks, incidents, approvals) is read by kind, never by scanning every row.
``events_open``: which runs and tasks are still open is a join of two index ranges
(``JournalReader.open_events``), not a row lookup per run the journal ever held (0.1-0.3 s
each at a million rows); partial, so an append of any other kind (most of them: run
output) adds no index entry."""

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def connect(path: Path, *, writable: bool, busy_timeout_ms: int = 5000) -> apsw.Connection:
    """Open ``path`` as a reel journal, creating it when ``writable`` and absent.

    Raises :class:`NotAJournal`, :class:`SchemaTooNew` or :class:`JournalUnavailable` with one
    line that names the file and the problem.
    """
    exists = path.exists()
    if not exists and not writable:
        raise JournalUnavailable(f"no journal at {path}")
    if exists and path.is_dir():
        raise JournalUnavailable(f"{path} is a directory, not a journal file")
    if writable and exists and not os.access(path, os.W_OK):
        raise JournalUnavailable(f"journal {path} is read-only (no write permission)")
    if writable and not exists and not os.access(path.parent, os.W_OK):
        raise JournalUnavailable(f"cannot create journal in {path.parent}: directory is read-only")
    if writable and not exists:
        create_private(path)
    flags = (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        if writable
        else apsw.SQLITE_OPEN_READONLY
    )
    try:
        conn = apsw.Connection(str(path), flags=flags)
        conn.set_busy_timeout(busy_timeout_ms)
        app_id, version = _identity(conn)
        if app_id == 0 and version == 0 and _is_empty(conn):
            if not writable:
                raise NotAJournal(f"{path} is an empty database, not a reel journal")
            _create(conn)
            _index(conn)
            return conn
        if app_id != APPLICATION_ID:
            raise NotAJournal(f"{path} is not a reel journal (application_id {app_id:#x})")
        if version > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"journal {path} has schema version {version}; this reel reads up to "
                f"{SCHEMA_VERSION} - upgrade reel"
            )
        if version < SCHEMA_VERSION:
            raise SchemaTooOld(
                f"journal {path} has schema version {version}, whose checkpoints live outside "
                f"the hash chain; this reel reads version {SCHEMA_VERSION} only - keep it with "
                "the reel that wrote it (reel journal export) and start a new data dir"
            )
        if writable:
            _index(conn)
        return conn
    except apsw.NotADBError:
        raise NotAJournal(f"{path} is not a reel journal (not an SQLite database)") from None
    except apsw.BusyError:
        raise JournalUnavailable(f"journal {path} is locked by another process") from None
    except apsw.ReadOnlyError:
        raise JournalUnavailable(f"journal {path} is read-only") from None
    except apsw.CantOpenError:
        raise JournalUnavailable(f"cannot open journal {path}") from None
    except apsw.IOError as exc:
        raise JournalUnavailable(f"I/O error on journal {path}: {exc}") from None


def create_private(path: Path) -> None:
    """Create ``path`` empty, mode 0600, unless it exists: SQLite would create it 0644 (readable
    by every user), and its ``-wal`` and ``-shm`` files take the database file's mode."""
    with contextlib.suppress(FileExistsError):  # another process made it first: SQLite opens it
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _identity(conn: apsw.Connection) -> tuple[int, int]:
    app_id = conn.execute("PRAGMA application_id").get
    version = conn.execute("PRAGMA user_version").get
    return int(app_id or 0), int(version or 0)


def _is_empty(conn: apsw.Connection) -> bool:
    return bool(conn.execute("SELECT count(*) FROM sqlite_schema").get == 0)


def _index(conn: apsw.Connection) -> None:
    """Create what :data:`INDEXES` lists; one of their names defined otherwise (an older reel's
    ``events_open`` over fewer kinds, which no query would use any more) is built again."""
    with conn:
        for statement in INDEXES:
            name = statement.split(" ON ", 1)[0].rsplit(" ", 1)[1]
            held = conn.execute(
                "SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?", (name,)
            ).get
            if held is not None and held != statement.replace("IF NOT EXISTS ", ""):
                conn.execute(f"DROP INDEX {name}")
            conn.execute(statement)


def _create(conn: apsw.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    with conn:
        conn.execute(DDL)
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
