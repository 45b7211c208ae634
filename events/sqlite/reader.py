"""Read access to a journal file: positions, streams, head, checkpoints.

A :class:`JournalReader` never takes the writer lock, so ``reel journal verify`` and friends can
read a journal that a running node is appending to (WAL readers see committed rows only).
Connections are pooled and borrowed per query.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Self

import apsw

from events.catalog import JournalCheckpoint
from events.chain import GENESIS
from events.checkpoint import CHECKPOINT_STREAM, Checkpoint
from events.envelope import Head, StoredEvent
from events.errors import JournalClosed, JournalUnavailable, UnknownEventKind
from events.sqlite.schema import OPEN_KINDS, OPEN_WHERE, connect

COLUMNS = (
    "position, event_id, stream, stream_seq, kind, version, recorded_at_ms, principal, "
    "correlation_id, causation_id, payload, prev_hash, hash"
)
"""The envelope columns, in :class:`StoredEvent` field order."""

RawRow = tuple[int, str, str, int, str, int, int, str, str | None, str | None, bytes, bytes, bytes]


def to_event(row: RawRow) -> StoredEvent:
    """A :class:`StoredEvent` from a row selected with :data:`COLUMNS`."""
    return StoredEvent(
        position=row[0],
        event_id=row[1],
        stream=row[2],
        stream_seq=row[3],
        kind=row[4],
        version=row[5],
        recorded_at_ms=row[6],
        principal=row[7],
        correlation_id=row[8],
        causation_id=row[9],
        payload=row[10],
        prev_hash=row[11],
        hash=row[12],
        shard_pos=row[0],
    )


class JournalReader:
    """Reads a journal file; safe to use from many threads.

    Connections are pooled: a call borrows one for the duration of its query and gives it back,
    so the number of open connections follows the number of concurrent reads, not the number of
    threads that ever read (actors come and go by the thousand).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._idle: queue.SimpleQueue[apsw.Connection] = queue.SimpleQueue()
        self._connections: list[apsw.Connection] = []
        self._guard = threading.Lock()
        self._closed = False
        self._value("SELECT 1")  # fail now, with a clear error, if the file is not a journal

    @classmethod
    def open(cls, path: Path) -> Self:
        """Open ``path`` (read-only for a reader, read-write with defaults for a Journal).

        Raises :class:`events.JournalUnavailable` and its subclasses with one clear line."""
        return cls(path)

    @contextmanager
    def _borrow(self) -> Iterator[apsw.Connection]:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = connect(self.path, writable=False)
            with self._guard:
                self._connections.append(conn)
        try:
            yield conn
        finally:
            with self._guard:  # never back to the pool after close() emptied it
                if self._closed:
                    conn.close()
                else:
                    self._idle.put(conn)

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._borrow() as conn:
            return conn.execute(sql, args).fetchall()

    def _value(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._borrow() as conn:
            return conn.execute(sql, args).get

    def _events(self, sql: str, args: tuple[Any, ...]) -> list[StoredEvent]:
        """Rows of a ``COLUMNS`` query as events; a row with undecodable text is a clear error."""
        try:
            return [to_event(row) for row in self._rows(sql, args)]
        except UnicodeDecodeError:
            raise JournalUnavailable(
                f"journal {self.path}: a row cannot be read (a text column is not valid UTF-8); "
                "run reel journal verify"
            ) from None

    def head(self) -> Head:
        """The last position and its hash; ``Head(0, GENESIS)`` when empty."""
        row = self._value("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
        if row is None:
            return Head(0, GENESIS)
        position, hash_ = row
        return Head(int(position), bytes(hash_))

    def read(self, after_position: int = 0, limit: int = 1000) -> list[StoredEvent]:
        """Up to ``limit`` events with position greater than ``after_position``, in order."""
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
            (after_position, limit),
        )

    def read_stream(
        self, stream: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        """The events of ``stream`` with ``stream_seq > after_seq``, in order."""
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE stream = ? AND stream_seq > ? "
            "ORDER BY stream_seq LIMIT ?",
            (stream, after_seq, -1 if limit is None else limit),
        )

    def read_correlated(self, correlation_id: str, after_position: int = 0) -> list[StoredEvent]:
        """Events whose ``correlation_id`` is the given run, in journal order."""
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE correlation_id = ? AND position > ? "
            "ORDER BY position",
            (correlation_id, after_position),
        )

    def first_events(self, prefix: str) -> list[StoredEvent]:
        """The first event (``stream_seq`` 0) of every stream whose name starts with ``prefix``.

        Uses the stream index (no table scan): e.g. every ``session.created``."""
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE stream >= ? AND stream < ? AND stream_seq = 0 "
            "ORDER BY position",
            (prefix, prefix + "\U0010ffff"),
        )

    def events_of_kinds(self, kinds: tuple[str, ...], after_position: int = 0) -> list[StoredEvent]:
        """Every event of the given kinds, in journal order, through the ``events_by_kind``
        index (a table scan only on a file no writer has opened since the index came: a
        reader never creates it). Costs what it returns: for start-up state and rare kinds,
        never for ``run.output``."""
        marks = ",".join("?" * len(kinds))
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE kind IN ({marks}) AND position > ? "
            "ORDER BY position",
            (*kinds, after_position),
        )

    def open_events(
        self, kind: str, ended_by: tuple[str, ...], key: Literal["stream", "correlation_id"]
    ) -> list[StoredEvent]:
        """Every event of ``kind`` whose ``key`` (its stream, or its correlation id) no event
        of the kinds ``ended_by`` shares, in journal order: what is still open (runs accepted
        and not ended, tasks enqueued and not ended), found through the kind index without
        reading what ended. For the kinds of ``events_open`` (runs and tasks) both sides are
        ranges of that index and only the open rows are read (a file no writer has opened since
        the index came is read the slow way: SQLite picks another plan)."""
        marks = ",".join("?" * len(ended_by))
        indexed = f"{OPEN_WHERE} AND " if {kind, *ended_by} <= set(OPEN_KINDS) else ""
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE position IN (SELECT position FROM events WHERE "
            f"{indexed}kind = ? AND {key} IS NOT NULL AND {key} NOT IN (SELECT {key} FROM events"
            f" WHERE {indexed}kind IN ({marks}) AND {key} IS NOT NULL)) ORDER BY position",
            (kind, *ended_by),
        )

    def stream_next_seq(self, stream: str) -> int:
        """The ``stream_seq`` the stream's next event gets (0 for a new stream)."""
        value = self._value("SELECT max(stream_seq) FROM events WHERE stream = ?", (stream,))
        return 0 if value is None else int(value) + 1

    def checkpoints(self) -> list[Checkpoint]:
        """Every signed checkpoint, by position: the ``journal.checkpoint`` rows of the
        ``journal`` stream (read through the stream index). A row that does not decode as one
        is left out here; ``verify`` names it."""
        return _checkpoints(self.read_stream(CHECKPOINT_STREAM))

    def last_checkpoint(self) -> Checkpoint | None:
        """The checkpoint with the highest ``stream_seq`` on the ``journal`` stream, if any."""
        rows = self._events(
            f"SELECT {COLUMNS} FROM events WHERE stream = ? ORDER BY stream_seq DESC LIMIT 1",
            (CHECKPOINT_STREAM,),
        )
        found = _checkpoints(rows)
        return found[0] if found else None

    def bounds(self) -> tuple[int | None, int | None, int]:
        """``(min(position), max(position), count)`` over every row: positions are dense from 1
        exactly when they are ``(1, n, n)`` (positions are unique integers).

        Three subqueries, not one ``SELECT min(), max(), count()``: alone, ``min`` and ``max``
        each read one end of the rowid tree and ``count`` the smallest index, where together
        they fold every row in SQLite's VM (a quarter of a second at a million rows)."""
        low, high, count = self._rows(
            "SELECT (SELECT min(position) FROM events), (SELECT max(position) FROM events), "
            "(SELECT count(*) FROM events)"
        )[0]
        return low, high, int(count)

    def first_gap(self) -> int | None:
        """The first position from 1 up to the highest with no row, if any (a scan: for
        naming a fault only)."""
        value = self._value(
            "SELECT 1 WHERE EXISTS (SELECT 1 FROM events) "
            "AND NOT EXISTS (SELECT 1 FROM events WHERE position = 1) "
            "UNION ALL SELECT min(position) + 1 FROM events e WHERE position >= 1 "
            "AND position < (SELECT max(position) FROM events) "
            "AND NOT EXISTS (SELECT 1 FROM events n WHERE n.position = e.position + 1) "
            "LIMIT 1"
        )
        return int(value) if value is not None else None

    def raw_stream(self, stream: str) -> list[tuple[Any, ...]]:
        """The rows of ``stream`` as :meth:`scan` yields them, in position order (through the
        stream index)."""
        try:
            return self._rows(
                f"SELECT {COLUMNS}, payload_sha256 FROM events WHERE stream = ? ORDER BY position",
                (stream,),
            )
        except UnicodeDecodeError:
            raise JournalUnavailable(
                f"journal {self.path}: a row of stream {stream!r} cannot be read "
                "(a text column is not valid UTF-8)"
            ) from None

    def raw_rows(self, first: int, last: int) -> list[tuple[Any, ...]]:
        """Rows with ``first <= position <= last`` as :meth:`scan` yields them (for verifying
        a stretch of the chain). Raises :class:`JournalUnavailable` for an unreadable row."""
        try:
            return self._rows(
                f"SELECT {COLUMNS}, payload_sha256 FROM events WHERE position BETWEEN ? AND ? "
                "ORDER BY position",
                (first, last),
            )
        except UnicodeDecodeError:
            raise JournalUnavailable(
                f"journal {self.path}: a row between positions {first} and {last} cannot be "
                "read (a text column is not valid UTF-8)"
            ) from None

    def position_of_hash(self, hash_: bytes) -> int | None:
        """The position of the row whose hash is ``hash_`` (a full scan: for diagnosis only)."""
        value = self._value("SELECT position FROM events WHERE hash = ?", (hash_,))
        return int(value) if value is not None else None

    def prev_hash_at(self, position: int) -> bytes | None:
        """The stored ``prev_hash`` of the row at ``position``, if there is one."""
        value = self._value("SELECT prev_hash FROM events WHERE position = ?", (position,))
        return bytes(value) if isinstance(value, bytes) else None

    def count(self) -> int:
        """Number of rows (for progress; equals the head position in an intact journal)."""
        return int(self._value("SELECT count(*) FROM events"))

    def scan(self, batch: int = 20_000) -> Iterator[tuple[Any, ...]]:
        """Every row in position order with ``payload_sha256`` appended: for verify and export.

        Reads in keyed batches so a long scan never holds one read transaction open for long.
        Raises :class:`JournalUnavailable` at a row that cannot be read at all (a text column
        holding bytes that are not UTF-8), after yielding every row before it.
        """
        # Every row, whatever its position: the first batch starts at the lowest int64 itself
        # (a row at -2**63 is tampering too, and ``position > -2**63`` would skip it).
        last: Any = -(2**63)
        above = ">="
        while True:
            rows: list[tuple[Any, ...]] = []
            try:
                with self._borrow() as conn:
                    for row in conn.execute(
                        f"SELECT {COLUMNS}, payload_sha256 FROM events WHERE position {above} ? "
                        "ORDER BY position LIMIT ?",
                        (last, batch),
                    ):
                        rows.append(row)
            except UnicodeDecodeError:
                yield from rows
                after = rows[-1][0] if rows else (last if above == ">" else 0)
                raise JournalUnavailable(
                    f"journal {self.path}: the row after position {max(after, 0)} cannot be read "
                    "(a text column is not valid UTF-8)"
                ) from None
            if not rows:
                return
            yield from rows
            last = rows[-1][0]
            above = ">"

    def close(self) -> None:
        """Close every idle connection now; one borrowed by a read in another thread closes
        when that read gives it back (closing it under the read would fail both)."""
        with self._guard:
            self._closed = True
            while True:
                try:
                    conn = self._idle.get_nowait()
                except queue.Empty:
                    break
                conn.close()
            self._connections.clear()


def _checkpoints(rows: list[StoredEvent]) -> list[Checkpoint]:
    found: list[Checkpoint] = []
    for stored in rows:
        try:
            event = stored.decode()
        except UnknownEventKind:
            continue
        if isinstance(event, JournalCheckpoint):
            found.append(Checkpoint.of(event, stored.position, stored.recorded_at_ms))
    return found
