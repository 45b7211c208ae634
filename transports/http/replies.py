"""JSON responses from msgspec values (one encoder, the right content type)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

_encoder = msgspec.json.Encoder()


def json_reply(
    value: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """``value`` (a Struct, list or dict) as an ``application/json`` response."""
    return web.Response(
        body=_encoder.encode(value),
        status=status,
        content_type="application/json",
        headers=headers,
    )
