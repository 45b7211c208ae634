"""``GET /healthz``: liveness, without authentication (it reveals the status and the version)."""

from __future__ import annotations

from aiohttp import web

from transports.build import version
from transports.http.bodies import Health
from transports.http.context import CONTEXT
from transports.http.replies import json_reply

PUBLIC_ROUTES = frozenset({"healthz"})

routes = web.RouteTableDef()


@routes.get("/healthz", name="healthz")
async def get_health(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    if ctx.runtime.node.services.draining or ctx.closing.is_set():
        return json_reply(Health(status="draining", version=version()), status=503)
    return json_reply(Health(status="ok", version=version()))
