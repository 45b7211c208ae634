"""Approvals folded straight from the journal (no views.db): for commands that must see the
journal as it is now, such as ``reel approvals`` on a stopped node whose views may lag. The
fold is the approvals view's own (:class:`projections.approvals_view.ApprovalsProjection`), run
in memory, so its records are the view's rows (:class:`projections.records.ApprovalRecord`)."""

from __future__ import annotations

from events import JournalReadPort
from events.catalog import APPROVAL_KINDS
from projections.approvals_view import ApprovalsProjection
from projections.base import folded
from projections.queries import typed_rows
from projections.records import ApprovalRecord


def load_approvals(reader: JournalReadPort) -> dict[str, ApprovalRecord]:
    """Every approval the journal holds, by id, in request order."""
    with folded(ApprovalsProjection(), reader.events_of_kinds(APPROVAL_KINDS)) as conn:
        rows = typed_rows(conn, ApprovalRecord, "SELECT * FROM approvals ORDER BY rowid")
    return {row.approval_id: row for row in rows}
