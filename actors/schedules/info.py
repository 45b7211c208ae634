"""What every surface shows of a schedule (``GET /v1/schedules``, ``reel schedules list
--json``), kept apart from the desk so a client command that prints it loads no journal."""

from __future__ import annotations

import msgspec


class ScheduleInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One schedule as the API and the CLI show it."""

    schedule_id: str
    name: str
    cron: str
    """The cron line (empty for an interval)."""
    every_ms: int
    """The interval (0 for a cron line)."""
    tz: str
    session_key: str
    runs_as: str
    text: str
    catch_up: str
    overlap: str
    status: str
    """``active``, ``paused``, ``stopped`` or ``deleted``."""
    stopped: str | None = None
    next_due_ms: int | None = None
    """When it fires next (None unless active)."""
    last_run_id: str | None = None
    fired: int = 0
    skipped: int = 0
    created_by: str
    created_at_ms: int


class FiredRun(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to ``run-now``: the run the schedule fired (it starts, or waits behind the
    session's live run)."""

    name: str
    schedule_id: str
    run_id: str
