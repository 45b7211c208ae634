"""``/v1/vault``: list, set, rotate and delete the vault's secrets (docs/vault.md).

``vault.list`` and ``vault.manage`` (context: the secret's ``name`` and the ``operation``, set,
rotate or delete), admins only by default. A value travels in a request body only, is encrypted
in the data dir before the answer, and is in no answer, log line or event: the answer is the
secret's :class:`~actors.vault.store.SecretInfo`. A bad name or value in a body is a 400
naming ``$.name`` or ``$.value`` before any decision (a path naming no possible secret is a
404); the node's vault folds the change before the answer, so the
next tool call uses the new value.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from actors.vault.decide import InvalidSecret, check_name, check_value
from transports.http.bodies import RotateSecretRequest, SecretList, SetSecretRequest
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.inputs import read_body
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/vault")
async def list_secrets(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    await permit(request, "vault.list")
    return json_reply(SecretList(items=ctx.runtime.vault.list()))


@routes.post("/v1/vault")
async def set_secret(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, SetSecretRequest)
    name, value = check_name(body.name), check_value(body.value)
    who = await permit(request, "vault.manage", (name, {"name": name, "operation": "set"}))
    info = await asyncio.to_thread(
        ctx.runtime.vault.set, ctx.runtime.journal, name, value, by=who.principal
    )
    return json_reply(info, status=201)


@routes.post("/v1/vault/{name}/rotate")
async def rotate_secret(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    name = _path_name(request)
    value = check_value((await read_body(request, RotateSecretRequest)).value)
    who = await permit(request, "vault.manage", (name, {"name": name, "operation": "rotate"}))
    info = await asyncio.to_thread(
        ctx.runtime.vault.rotate, ctx.runtime.journal, name, value, by=who.principal
    )
    return json_reply(info)


@routes.delete("/v1/vault/{name}")
async def delete_secret(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    name = _path_name(request)
    who = await permit(request, "vault.manage", (name, {"name": name, "operation": "delete"}))
    info = await asyncio.to_thread(
        ctx.runtime.vault.delete, ctx.runtime.journal, name, by=who.principal
    )
    return json_reply(info)


def _path_name(request: web.Request) -> str:
    """The secret's name from the path; one no secret can have is a 404 (as a malformed id
    is), which does not repeat it: a value pasted in its place is never echoed."""
    try:
        return check_name(request.match_info["name"])
    except InvalidSecret:
        raise ApiError("not_found", "no secret of that name (see GET /v1/vault)") from None
