"""``reel.v1.Approvals``: List (filters, paged), Resolve, Watch (new and resolved approvals),
RevokeGrant (end an ``always`` grant).

Watch follows the journal for the events that request or resolve an approval (:data:`CHANGES`)
(reading only what was committed since it last looked) and sends each approval's view record once
the projector has applied the event, so the record is never older than the change it reports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from actors.approvals.always_grants import check_grant
from actors.messages import ResolveApproval, RevokeGrant
from events import StoredEvent
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    ChannelPairingRequested,
    ChannelPairingResolved,
    GrantRevoked,
    Verdict,
    kinds_of,
)
from events.fields import TOOL_NAME
from projections import ApprovalFilter, ApprovalRecord
from projections.follow import pages
from proto.reel.v1 import (
    ApprovalChange,
    ApprovalChangeKind,
    ApprovalsBase,
    ApprovalState,
    Decision,
    ListApprovalsRequest,
    ListApprovalsResponse,
    ResolveApprovalRequest,
    ResolveApprovalResponse,
    RevokeGrantRequest,
    RevokeGrantResponse,
    WatchApprovalsRequest,
)
from transports.grpc.context import (
    ServiceContext,
    page_size,
    page_token,
    require_id,
    require_identifier,
)
from transports.grpc.records import approval_message
from transports.grpc.run_stream import match_name
from transports.grpc.status import beyond_head, invalid
from transports.grpc.tape import SCOPE_NAMES

STATE_FILTER = {
    ApprovalState.UNSPECIFIED: None,
    ApprovalState.PENDING: "pending",
    ApprovalState.RESOLVED: "resolved",
}
CHANGES = {
    **dict.fromkeys(
        kinds_of(ApprovalRequested, ChannelPairingRequested), ApprovalChangeKind.REQUESTED
    ),
    **dict.fromkeys(
        kinds_of(ApprovalResolved, ChannelPairingResolved), ApprovalChangeKind.RESOLVED
    ),
}
"""The journal kinds that change an approval (tool calls and device pairings alike)."""
SCAN = 500


class ApprovalsService(ApprovalsBase):
    """The approvals queue over the approvals view and ResolveApproval."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def list(self, message: ListApprovalsRequest) -> ListApprovalsResponse:
        size = page_size(message.page_size)
        after = page_token(message.page_token)
        ctx = self.ctx
        who = await ctx.permit("approval.list")
        if message.state not in STATE_FILTER:
            raise invalid("state", f"unknown approval state {int(message.state)}")
        # An empty filter is "any"; a set one must be valid, as over HTTP (never "no match").
        where = ApprovalFilter(
            state=STATE_FILTER[message.state],
            run_id=require_id("run_id", message.run_id) if message.run_id else None,
            session_id=(
                require_id("session_id", message.session_id) if message.session_id else None
            ),
            tool=require_identifier("tool", message.tool, TOOL_NAME) if message.tool else None,
        )

        def wanted(record: ApprovalRecord) -> bool:
            return ctx.may(who, "approval.read", lambda: ctx.authority.approval_scope(record))

        views = self.ctx.views
        found: list[ApprovalRecord] = []
        cursor = after
        while len(found) <= size:
            batch = views.approvals_where(where, cursor, SCAN)
            found.extend(r for r in batch if wanted(r))
            if len(batch) < SCAN:
                break
            cursor = batch[-1].approval_id
        page = found[:size]
        more = len(found) > size
        return ListApprovalsResponse(
            approvals=[approval_message(r, ctx.runtime.catalog) for r in page],
            next_page_token=page[-1].approval_id if more and page else "",
        )

    async def resolve(self, message: ResolveApprovalRequest) -> ResolveApprovalResponse:
        approval_id = require_id("approval_id", message.approval_id)
        if message.decision not in (Decision.ALLOW, Decision.DENY):
            raise invalid("decision", "must be ALLOW or DENY")
        if message.scope not in SCOPE_NAMES:
            raise invalid("scope", "must be ONCE, SESSION or ALWAYS (unspecified means ONCE)")
        ctx = self.ctx
        decision: Verdict = "allow" if message.decision == Decision.ALLOW else "deny"
        scope = SCOPE_NAMES[message.scope]
        match = match_name(message.match)
        who = await ctx.permit(
            "approval.resolve",
            await ctx.scope(
                lambda: ctx.authority.approval_scope(approval_id, decision, scope, match)
            ),
        )
        command = ResolveApproval(
            approval_id=approval_id,
            decision=decision,
            scope=scope,
            match=match,
            prefix=message.prefix,
            principal=who.principal,
            reason=message.reason,
        )
        await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        return ResolveApprovalResponse(approval_id=approval_id, resolved=True)

    async def revoke_grant(self, message: RevokeGrantRequest) -> RevokeGrantResponse:
        """``grant.revoke``: answered once ``grant.revoked`` is journaled and the node no
        longer honours the grant."""
        check_grant(message.principal, message.tool)
        ctx = self.ctx
        who = await ctx.permit(
            "grant.revoke", ctx.authority.grant_scope(message.principal, message.tool)
        )
        command = RevokeGrant(
            principal=message.principal, tool=message.tool, revoked_by=who.principal
        )
        revoked: GrantRevoked = await asyncio.wrap_future(ctx.runtime.node.send(command))
        return RevokeGrantResponse(
            principal=revoked.principal, tool=revoked.tool, revoked_by=who.principal
        )

    async def watch(self, message: WatchApprovalsRequest) -> AsyncIterator[ApprovalChange]:
        ctx = self.ctx
        runtime = ctx.runtime
        who = await ctx.permit("approval.list")

        def readable(record: ApprovalRecord) -> bool:
            return ctx.may(who, "approval.read", lambda: ctx.authority.approval_scope(record))

        if message.after_position < 0:
            raise invalid("after_position", "must not be negative")
        beyond_head(message.after_position, runtime.journal.committed_position)
        async with ctx.stream():
            position = message.after_position or runtime.projector.position
            if message.include_pending:
                cursor: str | None = None
                while True:
                    batch = ctx.views.approvals("pending", cursor, SCAN)
                    for record in filter(readable, batch):
                        yield ApprovalChange(
                            change=ApprovalChangeKind.PENDING,
                            approval=approval_message(record, ctx.runtime.catalog),
                            position=position,
                        )
                    if len(batch) < SCAN:
                        break
                    cursor = batch[-1].approval_id

            def read(after: int, limit: int) -> list[StoredEvent]:
                # Only what the views already hold, so each record sent is never older than
                # the change it reports.
                applied = runtime.projector.position
                return (
                    runtime.journal.read(after, min(limit, applied - after))
                    if after < applied
                    else []
                )

            def wake() -> tuple[asyncio.Future[None]]:
                return (ctx.shutdown,)

            async for rows in pages(read, position, _position, ctx.applied, SCAN, wake):
                for stored in rows:
                    position = stored.position
                    kind = CHANGES.get(stored.kind)
                    if kind is None:
                        continue
                    approval_id = getattr(stored.decode(), "approval_id", "")
                    current = ctx.views.approval(approval_id)
                    if current is not None and readable(current):
                        yield ApprovalChange(
                            change=kind,
                            approval=approval_message(current, ctx.runtime.catalog),
                            position=position,
                        )
                if ctx.shutdown.done():
                    raise ctx.closing_error(f"watch again with after_position {position}")


def _position(stored: StoredEvent) -> int:
    return stored.position
