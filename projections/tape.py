"""The tape view: per run, every event of the run and of its tool invocations, in journal order,
numbered by a dense ``tape_seq`` from 0. Streams (SSE, gRPC) and resumes read it.

Rows are buffered and written with one ``executemany`` per batch (``flush``); the next
``tape_seq`` of each run is remembered between batches and read from the table only the first
time a run is seen (``reset`` forgets it when a batch rolls back).
"""

from __future__ import annotations

from typing import Any

import apsw
import msgspec

from events import Event, StoredEvent

_json = msgspec.json.Encoder()


class TapeProjection:
    name: str = "tape"
    version: int = 1
    tables: tuple[str, ...] = ("tape",)
    kinds: frozenset[str] | None = None
    ddl: str = """
    CREATE TABLE IF NOT EXISTS tape(
        run_id TEXT NOT NULL,
        tape_seq INTEGER NOT NULL,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL,
        stream TEXT NOT NULL,
        recorded_at_ms INTEGER NOT NULL,
        entry TEXT NOT NULL,
        PRIMARY KEY (run_id, tape_seq)
    ) WITHOUT ROWID;
    """

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._rows: list[tuple[Any, ...]] = []

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        run_id = stored.correlation_id
        if run_id is None:
            return
        seq = self._next.get(run_id)
        if seq is None:
            last: Any = conn.execute(
                "SELECT max(tape_seq) FROM tape WHERE run_id = ?", (run_id,)
            ).get
            seq = 0 if last is None else int(last) + 1
        self._next[run_id] = seq + 1
        self._rows.append(
            (
                run_id,
                seq,
                stored.position,
                stored.kind,
                stored.stream,
                stored.recorded_at_ms,
                _json.encode(event).decode(),
            )
        )

    def flush(self, conn: apsw.Connection) -> None:
        """Write the rows buffered since the last flush (inside the batch's transaction)."""
        if self._rows:
            conn.executemany("INSERT INTO tape VALUES (?,?,?,?,?,?,?)", self._rows)
            self._rows.clear()

    def reset(self) -> None:
        """Forget everything not committed (the batch rolled back)."""
        self._next.clear()
        self._rows.clear()
