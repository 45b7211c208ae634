"""reel's projections: read models folded from the journal into views.db.

Views (one projection each): sessions, runs, tape (per-run entries with a dense ``tape_seq``),
approvals, tool usage. views.db can be deleted at any time: the projector rebuilds it from the
journal. ``reel replay`` rebuilds into a fresh file and compares row by row.

Public surface::

    from projections import Projector, Views, replay

Errors: projections raise no errors of their own; journal errors (``events.JournalError``) pass
through, and apsw errors mean views.db itself is damaged (delete it to rebuild).
"""

from projections.projector import Projector, all_projections
from projections.queries import APPROVAL_STATES, ApprovalFilter, RunFilter, Views
from projections.records import (
    ApprovalRecord,
    GrantOption,
    RawTapeEntry,
    RunRecord,
    SessionRecord,
    TapeEntry,
    ToolUsageRecord,
)
from projections.replay import Difference, ReplayReport, compare, rebuild, replay

__all__ = [
    "APPROVAL_STATES",
    "ApprovalFilter",
    "ApprovalRecord",
    "Difference",
    "GrantOption",
    "Projector",
    "RawTapeEntry",
    "ReplayReport",
    "RunFilter",
    "RunRecord",
    "SessionRecord",
    "TapeEntry",
    "ToolUsageRecord",
    "Views",
    "all_projections",
    "compare",
    "rebuild",
    "replay",
]
