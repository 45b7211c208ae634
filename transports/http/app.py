"""The aiohttp application: routes, middleware and the node context, without any socket."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web

from projections import Views
from projections.follow import Signal
from transports.http import openapi, routes, tasks
from transports.http.context import CALLER, CONTEXT, ApiContext
from transports.http.freshness import VIEWS_BEHIND
from transports.http.guard import guard
from transports.runtime import Runtime

ROUTES = (openapi.routes, *routes.ROUTES)
"""Every route table the app serves, in matching order."""


async def say_how_far_behind(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: :data:`VIEWS_BEHIND` on an authenticated read's answer (an SSE
    stream's too, as it opens). Not on a refused request: only ``/healthz`` says it to anyone."""
    if request.method not in ("GET", "HEAD") or request.get(CALLER) is None:
        return
    runtime = request.app[CONTEXT].runtime
    behind = runtime.journal.committed_position - runtime.projector.position
    response.headers[VIEWS_BEHIND] = str(max(behind, 0))


def build_app(
    runtime: Runtime, token: str | None = None, *, keepalive_s: float = 15.0
) -> web.Application:
    """The API over ``runtime``: any valid token of the node (``token``, when given, as the
    admin's instead of the data dir's ``admin.token``)."""
    authority = runtime.authority if token is None else runtime.authority.with_admin_token(token)
    ctx = ApiContext(
        runtime=runtime,
        authority=authority,
        views=Views(runtime.views.path, runtime.views.limits),
        keepalive_s=keepalive_s,
    )
    app = web.Application(middlewares=[guard], client_max_size=runtime.config.http.max_body_bytes)
    app[CONTEXT] = ctx
    tasks.install(app, runtime.views.path, runtime.views.limits)
    for table in ROUTES:
        app.add_routes(table)

    unsubscribe: list[Callable[[], None]] = []

    async def follow_projector(_app: web.Application) -> None:
        ctx.applied = Signal(asyncio.get_running_loop(), runtime.projector.hurry)
        unsubscribe.append(runtime.projector.listen(ctx.applied.notify))

    async def end_streams(_app: web.Application) -> None:
        ctx.close_streams()
        for stop in unsubscribe:
            stop()

    async def close_views(_app: web.Application) -> None:
        ctx.views.close()

    app.on_startup.append(follow_projector)
    app.on_response_prepare.append(say_how_far_behind)
    app.on_shutdown.append(end_streams)
    app.on_cleanup.append(close_views)
    return app
