"""``GET /healthz``: liveness, without authentication (it reveals nothing but the status)."""

from __future__ import annotations

from aiohttp import web

from transports.http.bodies import Health
from transports.http.context import CONTEXT
from transports.http.replies import json_reply

PUBLIC_ROUTES = frozenset({"healthz"})

routes = web.RouteTableDef()


@routes.get("/healthz", name="healthz")
async def get_health(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    if ctx.runtime.node.services.draining or ctx.closing.is_set():
        return json_reply(Health(status="draining"), status=503)
    return json_reply(Health(status="ok"))
