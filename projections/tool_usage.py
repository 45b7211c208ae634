"""The tool usage view: per tool, how often it was proposed, allowed, denied, asked, and how its
calls ended."""

from __future__ import annotations

import apsw

from events import Event, StoredEvent
from events.catalog import ToolCompleted, ToolDecided, ToolProposed, kinds_of

COUNTERS = frozenset({"proposed", "allowed", "denied", "approval_required", "succeeded", "failed"})


class ToolUsageProjection:
    name: str = "tool_usage"
    version: int = 1
    tables: tuple[str, ...] = ("tool_usage",)
    kinds: frozenset[str] | None = frozenset(kinds_of(ToolProposed, ToolDecided, ToolCompleted))
    ddl: str = """
    CREATE TABLE IF NOT EXISTS tool_usage(
        tool TEXT PRIMARY KEY,
        proposed INTEGER NOT NULL DEFAULT 0,
        allowed INTEGER NOT NULL DEFAULT 0,
        denied INTEGER NOT NULL DEFAULT 0,
        approval_required INTEGER NOT NULL DEFAULT 0,
        succeeded INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        total_duration_ms INTEGER NOT NULL DEFAULT 0
    );
    """

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        if isinstance(event, ToolProposed):
            self._bump(conn, event.tool, "proposed")
        elif isinstance(event, ToolDecided):
            self._bump(conn, event.tool, event.outcome)
        elif isinstance(event, ToolCompleted):
            self._bump(conn, event.tool, "succeeded" if event.ok else "failed", event.duration_ms)

    @staticmethod
    def _bump(conn: apsw.Connection, tool: str, column: str, duration_ms: int = 0) -> None:
        column = {"allow": "allowed", "deny": "denied"}.get(column, column)
        assert column in COUNTERS
        conn.execute(
            f"INSERT INTO tool_usage(tool, {column}, total_duration_ms) VALUES (?, 1, ?)"
            f" ON CONFLICT(tool) DO UPDATE SET {column} = {column} + 1,"
            " total_duration_ms = total_duration_ms + excluded.total_duration_ms",
            (tool, duration_ms),
        )
