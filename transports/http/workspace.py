"""``/v1/workspace``: the workspace's checkpoints, what changed since one, and a restore
(actors/checkpoints.py). Reading is ``workspace.read``; a restore is ``workspace.restore``,
decided by Cedar and recorded (``access.decided``, then ``workspace.checkpointed``)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from actors import checkpoints
from tools.checkpoints import Checkpointer
from transports.http.bodies import RestoreWorkspaceRequest, WorkspaceCheckpointPage
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import LIST_CAP, is_ulid, page_limit, read_body
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/workspace/checkpoints")
async def list_workspace_checkpoints(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    limit = page_limit(request, LIST_CAP)
    await permit(request, "workspace.read")
    journal = ctx.runtime.journal
    items = await asyncio.to_thread(checkpoints.list_checkpoints, journal)
    newest = tuple(reversed(items))[: limit.value]
    return json_reply(
        WorkspaceCheckpointPage(items=newest, limit=limit.value, limit_clamped=limit.clamped)
    )


@routes.get("/v1/workspace/diff")
async def workspace_diff(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    since = request.query.get("since")
    if since is None or not is_ulid(since):
        raise ApiError("invalid_argument", "since must be a checkpoint id", "query.since")
    await permit(request, "workspace.read")
    diff = await asyncio.to_thread(
        checkpoints.diff_since, ctx.runtime.journal, _checkpointer(ctx), since
    )
    return json_reply(diff)


@routes.post("/v1/workspace/restore")
async def restore_workspace(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, RestoreWorkspaceRequest)
    who = await permit(request, "workspace.restore")
    made = await asyncio.to_thread(
        checkpoints.restore,
        ctx.runtime.journal,
        _checkpointer(ctx),
        ctx.runtime.node.services.workspace,
        body.checkpoint,
        before=body.before,
        principal=who.principal,
    )
    return json_reply(made)


def _checkpointer(ctx: ApiContext) -> Checkpointer:
    found = ctx.runtime.node.services.catalog.checkpoints
    if found is None:
        raise ApiError("unavailable", "this node keeps no workspace checkpoints")
    return found
