"""reel's projections: read models folded from the journal into views.db.

Views (one projection each): sessions, runs, tape (per-run entries with a dense ``tape_seq``),
approvals, tool usage, learning (candidates and their evidence; :class:`LearningView`,
docs/learning.md), memory (items with FTS5 and sqlite-vec indexes; hybrid search in
:class:`MemoryView`, docs/memory.md), incidents (what the watchdog found; :class:`IncidentsView`),
usage (tokens and runs by day, principal, session and model; :class:`UsageView`, docs/usage.md).
views.db can be deleted at any time: the projector rebuilds it from the journal. ``reel replay``
rebuilds into a fresh file and compares row by row.

Public surface::

    from projections import Projector, Views, replay
    from projections import MemoryView, make_embedder   # memory search; [memory] embedder
    from projections import IncidentsView, WatchReads    # incidents; what the watchdog reads

Errors: projections raise one error of their own, :class:`EmbedderUnavailable` (an unknown
embedder name, or a model whose extra is not installed; the message says which); journal errors
(``events.JournalError``) pass through, and apsw errors mean views.db itself is damaged (delete
it to rebuild).
"""

from typing import TYPE_CHECKING

from events.lazy import exports

if TYPE_CHECKING:
    from projections.incidents import (
        INCIDENT_STATES,
        IncidentFilter,
        IncidentRecord,
        IncidentsView,
        load_incidents,
    )
    from projections.learning import (
        CandidateFilter,
        CandidateRecord,
        Evidence,
        LearningView,
        Offered,
    )
    from projections.memory.embedders import (
        Embedder,
        EmbedderUnavailable,
        HashingEmbedder,
        available_embedders,
        make_embedder,
    )
    from projections.memory.search import MemoryHit, MemoryItem, MemoryView, SearchWeights
    from projections.projector import Projector, all_projections
    from projections.queries import APPROVAL_STATES, ApprovalFilter, RunFilter, SessionFilter, Views
    from projections.records import (
        ApprovalRecord,
        GrantOption,
        RawTapeRecord,
        RunRecord,
        SessionRecord,
        TapeRecord,
        ToolUsageRecord,
    )
    from projections.replay import Difference, ReplayReport, compare, rebuild, replay
    from projections.tasks import TASK_STATES, TaskFilter, TaskRecord, TasksView
    from projections.usage import Price, TokenCounts, UsageReport, UsageView, load_usage
    from projections.watch import (
        JournalVerdict,
        Lag,
        PendingApproval,
        RunActivity,
        TaskLease,
        WatchReads,
    )

__all__ = [
    "APPROVAL_STATES",
    "INCIDENT_STATES",
    "TASK_STATES",
    "ApprovalFilter",
    "ApprovalRecord",
    "CandidateFilter",
    "CandidateRecord",
    "Difference",
    "Embedder",
    "EmbedderUnavailable",
    "Evidence",
    "GrantOption",
    "HashingEmbedder",
    "IncidentFilter",
    "IncidentRecord",
    "IncidentsView",
    "JournalVerdict",
    "Lag",
    "LearningView",
    "MemoryHit",
    "MemoryItem",
    "MemoryView",
    "Offered",
    "PendingApproval",
    "Price",
    "Projector",
    "RawTapeRecord",
    "ReplayReport",
    "RunActivity",
    "RunFilter",
    "RunRecord",
    "SearchWeights",
    "SessionFilter",
    "SessionRecord",
    "TapeRecord",
    "TaskFilter",
    "TaskLease",
    "TaskRecord",
    "TasksView",
    "TokenCounts",
    "ToolUsageRecord",
    "UsageReport",
    "UsageView",
    "Views",
    "WatchReads",
    "all_projections",
    "available_embedders",
    "compare",
    "load_incidents",
    "load_usage",
    "make_embedder",
    "rebuild",
    "replay",
]

__getattr__ = exports(
    __name__,
    {
        "projections.memory.embedders": (
            "Embedder",
            "EmbedderUnavailable",
            "HashingEmbedder",
            "available_embedders",
            "make_embedder",
        ),
        "projections.incidents": (
            "INCIDENT_STATES",
            "IncidentFilter",
            "IncidentRecord",
            "IncidentsView",
            "load_incidents",
        ),
        "projections.learning": (
            "CandidateFilter",
            "CandidateRecord",
            "Evidence",
            "LearningView",
            "Offered",
        ),
        "projections.memory.search": ("MemoryHit", "MemoryItem", "MemoryView", "SearchWeights"),
        "projections.projector": ("Projector", "all_projections"),
        "projections.queries": (
            "APPROVAL_STATES",
            "ApprovalFilter",
            "RunFilter",
            "SessionFilter",
            "Views",
        ),
        "projections.records": (
            "ApprovalRecord",
            "GrantOption",
            "RawTapeRecord",
            "RunRecord",
            "SessionRecord",
            "TapeRecord",
            "ToolUsageRecord",
        ),
        "projections.replay": ("Difference", "ReplayReport", "compare", "rebuild", "replay"),
        "projections.tasks": ("TASK_STATES", "TaskFilter", "TaskRecord", "TasksView"),
        "projections.usage": ("Price", "TokenCounts", "UsageReport", "UsageView", "load_usage"),
        "projections.watch": (
            "JournalVerdict",
            "Lag",
            "PendingApproval",
            "RunActivity",
            "TaskLease",
            "WatchReads",
        ),
    },
)
"""Each name is imported from its module when first used (:mod:`events.lazy`): a CLI command
that reads one record type never loads the other views."""
