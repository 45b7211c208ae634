"""The tool usage view: per tool, how often it was proposed, allowed, denied, asked, and how its
calls ended.

A batch's counts are added up in memory and written by :meth:`ToolUsageProjection.flush`, one
row per tool the batch touched (replay folds three tool events a call: a statement each was a
tenth of a rebuild's time); :meth:`ToolUsageProjection.reset` forgets them when the batch rolls
back."""

from __future__ import annotations

import apsw

from events import Event, StoredEvent
from events.catalog import ToolCompleted, ToolDecided, ToolProposed, kinds_of

COUNTERS = ("proposed", "allowed", "denied", "approval_required", "succeeded", "failed")
"""The count columns, in the order a batch's sums are kept (then ``total_duration_ms``)."""
_INDEX = {name: i for i, name in enumerate(COUNTERS)} | {"allow": 1, "deny": 2}
"""A column's place in a sum (a decision's outcome ``allow`` / ``deny`` counts as
``allowed`` / ``denied``)."""
_DURATION = len(COUNTERS)
_UPSERT = (
    f"INSERT INTO tool_usage(tool, {', '.join(COUNTERS)}, total_duration_ms)"
    f" VALUES (?, {', '.join('?' * len(COUNTERS))}, ?) ON CONFLICT(tool) DO UPDATE SET "
    + ", ".join(f"{c} = {c} + excluded.{c}" for c in (*COUNTERS, "total_duration_ms"))
)


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

    def __init__(self) -> None:
        self._sums: dict[str, list[int]] = {}
        """Per tool, this batch's counts (``COUNTERS``' order) and duration."""

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        if isinstance(event, ToolProposed):
            self._bump(event.tool, "proposed")
        elif isinstance(event, ToolDecided):
            self._bump(event.tool, event.outcome)
        elif isinstance(event, ToolCompleted):
            self._bump(event.tool, "succeeded" if event.ok else "failed", event.duration_ms)

    def _bump(self, tool: str, column: str, duration_ms: int = 0) -> None:
        sums = self._sums.get(tool)
        if sums is None:
            sums = self._sums[tool] = [0] * (len(COUNTERS) + 1)
        sums[_INDEX[column]] += 1
        sums[_DURATION] += duration_ms

    def flush(self, conn: apsw.Connection) -> None:
        """Add the batch's sums to the view, one row per tool (inside the batch's transaction)."""
        if self._sums:
            conn.executemany(_UPSERT, [(tool, *sums) for tool, sums in self._sums.items()])
            self._sums = {}

    def reset(self) -> None:
        """The batch rolled back: forget its sums."""
        self._sums = {}
