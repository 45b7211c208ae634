"""``/v1/approvals``: the queue (pending or resolved) and human decisions; ``/v1/grants/revoke``:
taking back an ``always`` grant a decision made."""

from __future__ import annotations

from aiohttp import web

from actors.approvals.always_grants import check_grant
from actors.messages import ResolveApproval, RevokeGrant
from events.catalog import GrantRevoked
from projections import ApprovalFilter, ApprovalRecord
from transports.access.grants import presented
from transports.http.bodies import ApprovalPage, DecisionRequest, RevokedGrant, RevokeGrantRequest
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    APPROVAL_FILTERS,
    LIST_CAP,
    after_id,
    page_limit,
    path_id,
    query_filter,
    read_body,
)
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/approvals")
async def list_approvals(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    where = query_filter(request, ApprovalFilter, APPROVAL_FILTERS)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    who = await permit(request, "approval.list")
    rows = ctx.views.approvals_where(where, after, limit.value + 1)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    # Filtered after paging: a page may hold fewer items than the limit and still go on.
    return json_reply(
        ApprovalPage(
            items=[
                presented(r, ctx.runtime.catalog)
                for r in ctx.readable(who, "approval.read", items, ctx.authority.approval_scope)
            ],
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].approval_id if more else None,
        )
    )


@routes.get("/v1/approvals/{approval_id}")
async def get_approval(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    record = await approval_record(ctx, path_id(request, "approval_id", "approval"))
    await permit(request, "approval.read", ctx.authority.approval_scope(record))
    return json_reply(record)


@routes.post("/v1/approvals/{approval_id}")
async def decide_approval(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    approval_id = path_id(request, "approval_id", "approval")
    body = await read_body(request, DecisionRequest)
    record = await approval_record(ctx, approval_id)
    who = await permit(
        request,
        "approval.resolve",
        ctx.authority.approval_scope(record, body.decision, body.scope, body.match),
    )
    await ctx.command(
        ResolveApproval(
            approval_id=approval_id,
            decision=body.decision,
            scope=body.scope,
            match=body.match,
            prefix=body.prefix,
            reason=body.reason,
            principal=who.principal,
        )
    )
    await ctx.caught_up()
    return json_reply(await approval_record(ctx, approval_id))


@routes.post("/v1/grants/revoke")
async def revoke_grant(request: web.Request) -> web.Response:
    """``grant.revoke``: the node records ``grant.revoked``, then stops honouring the grant; a
    principal holding no such grant is a 409 and nothing is recorded."""
    ctx = request.app[CONTEXT]
    body = await read_body(request, RevokeGrantRequest)
    check_grant(body.principal, body.tool)
    who = await permit(
        request, "grant.revoke", ctx.authority.grant_scope(body.principal, body.tool)
    )
    revoked: GrantRevoked = await ctx.command(
        RevokeGrant(principal=body.principal, tool=body.tool, revoked_by=who.principal)
    )
    return json_reply(
        RevokedGrant(principal=revoked.principal, tool=revoked.tool, revoked_by=who.principal)
    )


async def approval_record(ctx: ApiContext, approval_id: str) -> ApprovalRecord:
    views = ctx.views
    record = await ctx.fresh(lambda: views.approval(approval_id))
    if record is None:
        raise ApiError("not_found", f"no approval with id {approval_id!r}")
    return presented(record, ctx.runtime.catalog)
