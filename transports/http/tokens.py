"""``/v1/tokens``: create, list and revoke API tokens (``token.manage``, admins by default).

A new token is in the 201 answer once and nowhere else (the journal keeps its SHA-256); the
node's token book is updated before the answer, so the token works at once, and a revoked one
is refused from the next request on.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from transports.access import tokens as store
from transports.access.tokens import created_token, token_info
from transports.http.bodies import CreateTokenRequest, TokenList
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.inputs import query_reason, read_body
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.post("/v1/tokens")
async def create_token(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, CreateTokenRequest)
    who = await permit(request, "token.manage")
    now_ms = int(time.time() * 1000)
    expires = None if body.expires_in_s is None else now_ms + body.expires_in_s * 1000
    token, record = await asyncio.to_thread(
        store.create_token,
        ctx.runtime.journal,
        ctx.authority.tokens,
        principal=body.principal,
        roles=body.roles,
        created_by=who.principal,
        expires_at_ms=expires,
        note=body.note,
    )
    return json_reply(created_token(token, record, now_ms), status=201)


@routes.get("/v1/tokens")
async def list_tokens(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    await permit(request, "token.manage")
    now_ms = int(time.time() * 1000)
    return json_reply(
        TokenList(items=[token_info(r, now_ms) for r in ctx.authority.tokens.records()])
    )


@routes.delete("/v1/tokens/{token_id}")
async def revoke_token(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    token_id = request.match_info["token_id"]
    reason = query_reason(request)
    if ctx.authority.tokens.get(token_id) is None:
        await permit(request, "token.manage")
        raise ApiError("not_found", f"no token with id {token_id[:40]!r}")
    who = await permit(request, "token.manage")
    record = await asyncio.to_thread(
        store.revoke_token,
        ctx.runtime.journal,
        ctx.authority.tokens,
        token_id,
        revoked_by=who.principal,
        reason=reason,
    )
    return json_reply(token_info(record, int(time.time() * 1000)))
