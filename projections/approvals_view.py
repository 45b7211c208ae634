"""The approvals view: pending and resolved, scope, who decided, how long it waited.

Two subjects share it: tool calls (``tool.approval_requested`` / ``tool.approval_resolved``) and
chat senders asking to be paired (``channel.pairing_requested`` / ``channel.pairing_resolved``,
``subject = 'pairing'``), so every surface that lists and decides approvals shows both."""

from __future__ import annotations

import apsw
import msgspec

from events import Event, StoredEvent
from events.catalog import (
    APPROVAL_KINDS,
    ApprovalRequested,
    ApprovalResolved,
    ChannelPairingRequested,
    ChannelPairingResolved,
)

_json = msgspec.json.Encoder()


class ApprovalsProjection:
    name: str = "approvals"
    version: int = 3
    tables: tuple[str, ...] = ("approvals",)
    kinds: frozenset[str] | None = frozenset(APPROVAL_KINDS)
    ddl: str = """
    CREATE TABLE IF NOT EXISTS approvals(
        approval_id TEXT PRIMARY KEY,
        invocation_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        risk TEXT NOT NULL,
        reason TEXT NOT NULL,
        principal TEXT NOT NULL,
        requested_at_ms INTEGER NOT NULL,
        expires_at_ms INTEGER NOT NULL,
        state TEXT NOT NULL,
        decision TEXT,
        scope TEXT,
        decided_by TEXT,
        decided_reason TEXT,
        resolved_at_ms INTEGER,
        waited_ms INTEGER,
        match TEXT,
        prefix TEXT,
        subject TEXT NOT NULL DEFAULT 'tool'
    );
    CREATE INDEX IF NOT EXISTS approvals_by_state ON approvals(state, requested_at_ms);
    """

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        if isinstance(event, ApprovalRequested):
            conn.execute(
                "INSERT OR REPLACE INTO approvals(approval_id, invocation_id, run_id, session_id,"
                " tool, arguments, risk, reason, principal, requested_at_ms, expires_at_ms, state)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,'pending')",
                (
                    event.approval_id,
                    event.invocation_id,
                    event.run_id,
                    event.session_id,
                    event.tool,
                    _json.encode(event.arguments).decode(),
                    event.risk,
                    event.reason,
                    stored.principal,
                    stored.recorded_at_ms,
                    event.expires_at_ms,
                ),
            )
        elif isinstance(event, ApprovalResolved):
            conn.execute(
                "UPDATE approvals SET state = 'resolved', decision = ?, scope = ?, decided_by = ?,"
                " decided_reason = ?, resolved_at_ms = ?, waited_ms = ? - requested_at_ms,"
                " match = ?, prefix = ? WHERE approval_id = ?",
                (
                    event.decision,
                    event.scope,
                    event.decided_by,
                    event.reason,
                    stored.recorded_at_ms,
                    stored.recorded_at_ms,
                    event.match if event.decision == "allow" and event.scope == "session" else None,
                    event.prefix if event.match == "prefix" else None,
                    event.approval_id,
                ),
            )
        elif isinstance(event, ChannelPairingRequested):
            conn.execute(
                "INSERT OR REPLACE INTO approvals(approval_id, invocation_id, run_id, session_id,"
                " tool, arguments, risk, reason, principal, requested_at_ms, expires_at_ms, state,"
                " subject) VALUES (?,'','','','',?,?,?,?,?,?,'pending','pairing')",
                (
                    event.approval_id,
                    _json.encode(pairing_arguments(event)).decode(),
                    PAIRING_RISK,
                    pairing_reason(event),
                    event.principal,
                    stored.recorded_at_ms,
                    event.expires_at_ms,
                ),
            )
        elif isinstance(event, ChannelPairingResolved):
            conn.execute(
                "UPDATE approvals SET state = 'resolved', decision = ?, scope = 'once',"
                " decided_by = ?, decided_reason = ?, resolved_at_ms = ?,"
                " waited_ms = ? - requested_at_ms WHERE approval_id = ?",
                (
                    event.decision,
                    event.decided_by,
                    event.reason,
                    stored.recorded_at_ms,
                    stored.recorded_at_ms,
                    event.approval_id,
                ),
            )


PAIRING_RISK = "high"
"""A pairing approval's risk: the sender may then start runs under the channel's policy."""


def pairing_arguments(event: ChannelPairingRequested) -> dict[str, str]:
    """What a pairing approval shows as its ``arguments``."""
    return {
        "channel": event.channel,
        "sender": event.principal,
        "display_name": event.display_name,
        "conversation": event.conversation,
    }


def pairing_reason(event: ChannelPairingRequested) -> str:
    """A pairing approval's ``reason``, in words."""
    return (
        f"device pairing: {event.principal} sent a valid pairing code in a direct message on "
        f"channel {event.channel}"
    )
