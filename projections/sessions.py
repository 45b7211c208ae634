"""The sessions view: one row per session, with run and reset counts."""

from __future__ import annotations

import apsw

from events import Event, StoredEvent
from events.catalog import RunAccepted, SessionCreated, SessionReset, kinds_of


class SessionsProjection:
    name: str = "sessions"
    version: int = 1
    tables: tuple[str, ...] = ("sessions",)
    kinds: frozenset[str] | None = frozenset(kinds_of(SessionCreated, SessionReset, RunAccepted))
    ddl: str = """
    CREATE TABLE IF NOT EXISTS sessions(
        session_id TEXT PRIMARY KEY,
        session_key TEXT,
        label TEXT,
        parent_session_id TEXT,
        branched_from_run_id TEXT,
        principal TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        updated_at_ms INTEGER NOT NULL,
        runs INTEGER NOT NULL DEFAULT 0,
        resets INTEGER NOT NULL DEFAULT 0,
        last_run_id TEXT
    );
    """

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        at = stored.recorded_at_ms
        if isinstance(event, SessionCreated):
            conn.execute(
                "INSERT OR REPLACE INTO sessions(session_id, session_key, label, parent_session_id,"
                " branched_from_run_id, principal, created_at_ms, updated_at_ms)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (
                    event.session_id,
                    event.session_key,
                    event.label,
                    event.parent_session_id,
                    event.branched_from_run_id,
                    stored.principal,
                    at,
                    at,
                ),
            )
        elif isinstance(event, SessionReset):
            conn.execute(
                "UPDATE sessions SET resets = resets + 1, updated_at_ms = ? WHERE session_id = ?",
                (at, event.session_id),
            )
        elif isinstance(event, RunAccepted):
            conn.execute(
                "UPDATE sessions SET runs = runs + 1, last_run_id = ?, updated_at_ms = ?"
                " WHERE session_id = ?",
                (event.run_id, at, event.session_id),
            )
