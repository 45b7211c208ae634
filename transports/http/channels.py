"""``/v1/channels``: the configured chat channels, routing a message into one, pairing codes,
and the webhook connector's inbound route (docs/channels.md).

- ``GET /v1/channels`` (``channel.list``): each channel's kind and router policy.
- ``POST /v1/channels/{channel}/messages`` (``channel.route``): the router's decision on one
  message, exactly as if its connector had delivered it (``RouteMessage`` over HTTP).
- ``POST /v1/channels/{channel}/pair-codes`` (``channel.pair``): a single-use pairing code,
  shown in this answer only.
- ``POST /v1/channels/{channel}/webhook``: no bearer token; the ``X-Reel-Signature`` HMAC of
  the raw body is the authentication. A bad or missing signature is a 401 and nothing else
  happens but ``reel_channel_webhook_bad_signatures_total`` going up.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from actors.channels.config import PAIRING_TTL_RANGE_MS, duration_ms
from actors.channels.message import InboundMessage, MessageBody
from transports.channels import ChannelInfo, MintedCode, RouteResult, configured
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.inputs import json_content_type, not_utf8, read_body
from transports.http.replies import json_reply

if TYPE_CHECKING:
    from transports.channels import ChannelHub

WEBHOOK_ROUTE = "channel_webhook"
PUBLIC_ROUTES = frozenset({WEBHOOK_ROUTE})
"""Routes the guard lets through without a bearer token (the webhook checks its signature)."""

routes = web.RouteTableDef()


class PairCodeRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/channels/{channel}/pair-codes``: how long the code lives (default: the
    channel's ``pairing_ttl``)."""

    ttl: str | None = None
    """A duration from 30s to 24h, e.g. ``10m``."""


class ChannelList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/channels``."""

    items: list[ChannelInfo]


def channel_of(request: web.Request) -> tuple[str, ChannelHub]:
    """The configured channel the path names and the hub that holds it (404 otherwise)."""
    name = request.match_info["channel"]
    return name, configured(request.app[CONTEXT].runtime.channels, name)


async def route(hub: ChannelHub, message: InboundMessage) -> RouteResult:
    """The decision on ``message``; bad input is a 400 naming its field."""
    return await asyncio.wrap_future(hub.receive(message))


@routes.get("/v1/channels")
async def list_channels(request: web.Request) -> web.Response:
    await permit(request, "channel.list")
    hub = request.app[CONTEXT].runtime.channels
    items = await asyncio.to_thread(hub.describe) if hub is not None else []
    return json_reply(ChannelList(items=items))


@routes.post("/v1/channels/{channel}/messages")
async def route_message(request: web.Request) -> web.Response:
    name, hub = channel_of(request)
    body = await read_body(request, MessageBody)
    await permit(request, "channel.route", (name, {}))
    return json_reply(await route(hub, body.message(name)))


@routes.post("/v1/channels/{channel}/pair-codes")
async def mint_pair_code(request: web.Request) -> web.Response:
    name, hub = channel_of(request)
    body = await read_body(request, PairCodeRequest, optional=True)
    ttl = body.ttl or hub.config(name).pairing_ttl
    try:
        ttl_ms = duration_ms(ttl)
    except ValueError as exc:
        raise ApiError("invalid_argument", str(exc), "$.ttl") from None
    low, high = PAIRING_TTL_RANGE_MS
    if not low <= ttl_ms <= high:
        raise ApiError("invalid_argument", "the ttl must be between 30s and 24h", "$.ttl")
    who = await permit(request, "channel.pair", (name, {}))
    minted: MintedCode = await asyncio.wrap_future(hub.mint_code(name, ttl_ms, who.principal))
    return json_reply(minted, status=201)


@routes.post("/v1/channels/{channel}/webhook", name=WEBHOOK_ROUTE)
async def receive_webhook(request: web.Request) -> web.Response:
    from transports.channels.webhook import SIGNATURE_HEADER, WebhookConnector

    name, hub = channel_of(request)
    connector = hub.connector(name)
    if not isinstance(connector, WebhookConnector):
        raise ApiError("not_found", f"channel {name!r} is not a webhook channel")
    raw = await request.read()
    if not connector.verify(raw, request.headers.get(SIGNATURE_HEADER)):
        hub.bad_signatures += 1
        raise ApiError(
            "unauthenticated",
            f"the {SIGNATURE_HEADER} header is missing or is not the body's HMAC-SHA256",
        )
    json_content_type(request)
    try:
        message = connector.parse(raw)
    except UnicodeDecodeError:
        raise not_utf8(raw) from None
    return json_reply(await route(hub, message))
