"""``GET /healthz``: liveness, without authentication (it reveals the status, the version and
how far the views are behind the journal)."""

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
    runtime = ctx.runtime
    draining = runtime.node.services.draining or ctx.closing.is_set()
    projector = runtime.projector
    if draining:
        health = Health(status="draining", version=version())
    elif projector.catching_up:
        health = Health(
            status="catching_up",
            version=version(),
            views_position=projector.position,
            journal_position=runtime.journal.committed_position,
        )
    else:
        health = Health(status="ok", version=version())
    return json_reply(health, status=503 if draining else 200)
