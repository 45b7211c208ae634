"""``GET /v1/usage``: tokens, runs and cost by principal, session or model over UTC days
(docs/usage.md). Cedar decides ``usage.read`` for the caller's own usage first, then for each
other principal in the answer: a principal without the right to read another's usage sees only
its own (an admin or a viewer sees everyone's)."""

from __future__ import annotations

import time

from aiohttp import web

from projections.usage import GROUPINGS, Grouping, UsageReport, query_days, report
from transports.access.authority import Scope
from transports.http.context import CONTEXT, caller, permit
from transports.http.failures import ApiError
from transports.http.replies import json_reply

routes = web.RouteTableDef()


def usage_scope(principal: str) -> Scope:
    """``usage.read``'s scope: whose usage is read."""
    return ("local", {"of": principal})


def usage_query(request: web.Request) -> tuple[Grouping, str, str]:
    """``by``, ``from`` and ``to`` of the query (400 naming the parameter when one is bad)."""
    by = request.query.get("by", "principal")
    if by not in GROUPINGS:
        choices = ", ".join(GROUPINGS)
        raise ApiError(
            "invalid_argument", f"by must be one of {choices}, not {by[:32]!r}", "query.by"
        )
    try:
        first, last = query_days(
            request.query.get("from"), request.query.get("to"), time.time_ns() // 1_000_000
        )
    except ValueError as exc:
        field, problem = exc.args
        raise ApiError("invalid_argument", f"{field}: {problem}", f"query.{field}") from None
    return by, first, last  # type: ignore[return-value]  # checked: one of GROUPINGS


@routes.get("/v1/usage")
async def get_usage(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    by, first, last = usage_query(request)
    who = caller(request)
    await permit(request, "usage.read", usage_scope(who.principal))
    authority = ctx.runtime.authority
    readable: dict[str, bool] = {who.principal: True}

    def may(principal: str) -> bool:
        if principal not in readable:
            readable[principal] = authority.may(who, "usage.read", usage_scope(principal))
        return readable[principal]

    cells = [c for c in ctx.runtime.usage.cells(by, first, last) if may(c[0])]
    body: UsageReport = report(by, first, last, cells, ctx.runtime.config.usage.prices)
    return json_reply(body)
