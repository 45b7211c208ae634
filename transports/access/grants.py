"""What an approval grants, added to the approval records every transport serves.

The approvals view stores facts (scope, binding, prefix); the sentences are derived here, where
the node's tool catalog is known, so the console, the CLI and gRPC clients show the same words
(:mod:`actors.approvals.grants` writes them).
"""

from __future__ import annotations

import msgspec

from actors.approvals.grants import describe, options
from events.catalog import GRANT_SCOPES
from projections import ApprovalRecord, GrantOption
from tools import ToolCatalog, UnknownTool


def presented(record: ApprovalRecord, catalog: ToolCatalog) -> ApprovalRecord:
    """``record`` with ``options`` (pending) or ``covers`` (resolved) filled in."""
    if record.subject == "pairing":
        return _pairing(record)
    if record.state == "pending":
        try:
            args_type: type[msgspec.Struct] | None = catalog.spec(record.tool).args_type
        except UnknownTool:
            args_type = None
        return msgspec.structs.replace(
            record, options=options(record.tool, args_type, GRANT_SCOPES, record.principal)
        )
    if record.decision != "allow":
        covers = "nothing: the call was denied"
    else:
        covers = describe(
            record.tool,
            record.scope or "once",
            record.match or "any",
            record.prefix or "",
            record.principal,
        )
    return msgspec.structs.replace(record, covers=covers)


def _pairing(record: ApprovalRecord) -> ApprovalRecord:
    """A pairing approval: one choice, decided once (transports/channels)."""
    sender = record.principal
    if record.state == "pending":
        grants = f"{sender} may talk to the agent on this channel for the channel's pairing period"
        option = GrantOption(scope="once", match="any", covers=grants)
        return msgspec.structs.replace(record, options=(option,))
    covers = (
        f"{sender} is paired with the channel"
        if record.decision == "allow"
        else "nothing: the pairing was denied"
    )
    return msgspec.structs.replace(record, covers=covers)
