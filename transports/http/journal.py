"""``/v1/journal``: the head of the hash chain, and a full verification on demand."""

from __future__ import annotations

import asyncio

from aiohttp import web

from events import verify
from transports.http.bodies import JournalHead, VerifyRequest
from transports.http.context import CONTEXT
from transports.http.inputs import read_body
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/journal/head")
async def head(request: web.Request) -> web.Response:
    runtime = request.app[CONTEXT].runtime
    views_position = runtime.projector.position
    last = runtime.journal.head()
    return json_reply(
        JournalHead(position=last.position, hash=last.hash.hex(), views_position=views_position)
    )


@routes.post("/v1/journal/verify")
async def verify_journal(request: web.Request) -> web.Response:
    """Walk the whole chain and every signed checkpoint against the node's own key.

    It reads every row, so it runs on a worker thread, one at a time; the report carries any
    fault (a broken journal is a 200 with ``ok: false``, not an HTTP error)."""
    ctx = request.app[CONTEXT]
    await read_body(request, VerifyRequest, optional=True)
    journal = ctx.runtime.journal
    key = journal.node_key.public_key if journal.node_key is not None else None
    async with ctx.verify_lock:
        report = await asyncio.to_thread(verify, journal, trusted_public_key=key)
    return json_reply(report)
