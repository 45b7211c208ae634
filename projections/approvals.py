"""The approvals view as a pure fold of approval events: pending and resolved, who decided, how
long it waited. (The persistent projector and views.db come with the projections issue; this
fold is what they will store.)"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from events import JournalReader, StoredEvent
from events.catalog import ApprovalRequested, ApprovalResolved

APPROVAL_KINDS = ("tool.approval_requested", "tool.approval_resolved")


class ApprovalView(msgspec.Struct, kw_only=True):
    """One approval as an operator sees it."""

    approval_id: str
    invocation_id: str
    run_id: str
    session_id: str
    tool: str
    arguments: Any
    risk: str
    reason: str
    requested_at_ms: int
    expires_at_ms: int
    principal: str
    state: str = "pending"
    decision: str | None = None
    scope: str | None = None
    decided_by: str | None = None
    decided_reason: str | None = None
    resolved_at_ms: int | None = None
    waited_ms: int | None = None


def fold_approvals(events: Iterable[StoredEvent]) -> dict[str, ApprovalView]:
    """Approvals by id, in request order."""
    views: dict[str, ApprovalView] = {}
    for stored in events:
        event = stored.decode()
        if isinstance(event, ApprovalRequested):
            views[event.approval_id] = ApprovalView(
                approval_id=event.approval_id,
                invocation_id=event.invocation_id,
                run_id=event.run_id,
                session_id=event.session_id,
                tool=event.tool,
                arguments=event.arguments,
                risk=event.risk,
                reason=event.reason,
                requested_at_ms=stored.recorded_at_ms,
                expires_at_ms=event.expires_at_ms,
                principal=stored.principal,
            )
        elif isinstance(event, ApprovalResolved):
            view = views.get(event.approval_id)
            if view is None:
                continue
            view.state = "resolved"
            view.decision = event.decision
            view.scope = event.scope
            view.decided_by = event.decided_by
            view.decided_reason = event.reason
            view.resolved_at_ms = stored.recorded_at_ms
            view.waited_ms = stored.recorded_at_ms - view.requested_at_ms
    return views


def load_approvals(reader: JournalReader) -> dict[str, ApprovalView]:
    """Every approval the journal holds."""
    return fold_approvals(reader.events_of_kinds(APPROVAL_KINDS))
