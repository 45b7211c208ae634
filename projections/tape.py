"""The tape view: per run, every event of the run and of its tool invocations, in journal order,
numbered by a dense ``tape_seq`` from 0. Streams (SSE, gRPC) and resumes read it."""

from __future__ import annotations

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

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        run_id = stored.correlation_id
        if run_id is None:
            return
        row = conn.execute("SELECT max(tape_seq) FROM tape WHERE run_id = ?", (run_id,)).get
        seq = 0 if row is None else int(row) + 1
        conn.execute(
            "INSERT INTO tape VALUES (?,?,?,?,?,?,?)",
            (
                run_id,
                seq,
                stored.position,
                stored.kind,
                stored.stream,
                stored.recorded_at_ms,
                _json.encode(event).decode(),
            ),
        )
