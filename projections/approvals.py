"""Approvals folded straight from the journal (no views.db): for commands that must see the
journal as it is now, such as ``reel approvals`` on a stopped node whose views may lag. The
records are the approvals view's (:class:`projections.records.ApprovalRecord`)."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from events import JournalReadPort, StoredEvent
from events.catalog import (
    APPROVAL_KINDS,
    ApprovalRequested,
    ApprovalResolved,
    ChannelPairingRequested,
    ChannelPairingResolved,
)
from projections.approvals_view import PAIRING_RISK, pairing_arguments, pairing_reason
from projections.records import ApprovalRecord


def fold_approvals(events: Iterable[StoredEvent]) -> dict[str, ApprovalRecord]:
    """Approvals by id, in request order."""
    records: dict[str, ApprovalRecord] = {}
    for stored in events:
        event = stored.decode()
        if isinstance(event, ApprovalRequested):
            records[event.approval_id] = ApprovalRecord(
                approval_id=event.approval_id,
                invocation_id=event.invocation_id,
                run_id=event.run_id,
                session_id=event.session_id,
                tool=event.tool,
                arguments=event.arguments,
                risk=event.risk,
                reason=event.reason,
                principal=stored.principal,
                requested_at_ms=stored.recorded_at_ms,
                expires_at_ms=event.expires_at_ms,
                state="pending",
                decision=None,
                scope=None,
                decided_by=None,
                decided_reason=None,
                resolved_at_ms=None,
                waited_ms=None,
            )
        elif isinstance(event, ApprovalResolved) and event.approval_id in records:
            record = records[event.approval_id]
            records[event.approval_id] = msgspec.structs.replace(
                record,
                state="resolved",
                decision=event.decision,
                scope=event.scope,
                decided_by=event.decided_by,
                decided_reason=event.reason,
                resolved_at_ms=stored.recorded_at_ms,
                waited_ms=stored.recorded_at_ms - record.requested_at_ms,
                match=event.match
                if event.decision == "allow" and event.scope == "session"
                else None,
                prefix=event.prefix if event.match == "prefix" else None,
            )
        elif isinstance(event, ChannelPairingRequested):
            records[event.approval_id] = ApprovalRecord(
                approval_id=event.approval_id,
                invocation_id="",
                run_id="",
                session_id="",
                tool="",
                arguments=pairing_arguments(event),
                risk=PAIRING_RISK,
                reason=pairing_reason(event),
                principal=event.principal,
                requested_at_ms=stored.recorded_at_ms,
                expires_at_ms=event.expires_at_ms,
                state="pending",
                decision=None,
                scope=None,
                decided_by=None,
                decided_reason=None,
                resolved_at_ms=None,
                waited_ms=None,
                subject="pairing",
            )
        elif isinstance(event, ChannelPairingResolved) and event.approval_id in records:
            record = records[event.approval_id]
            records[event.approval_id] = msgspec.structs.replace(
                record,
                state="resolved",
                decision=event.decision,
                scope="once",
                decided_by=event.decided_by,
                decided_reason=event.reason,
                resolved_at_ms=stored.recorded_at_ms,
                waited_ms=stored.recorded_at_ms - record.requested_at_ms,
            )
    return records


def load_approvals(reader: JournalReadPort) -> dict[str, ApprovalRecord]:
    """Every approval the journal holds."""
    return fold_approvals(reader.events_of_kinds(APPROVAL_KINDS))
