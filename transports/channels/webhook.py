"""The generic webhook connector: JSON over HTTP both ways, signed with HMAC-SHA256.

Inbound: the platform POSTs to ``/v1/channels/<name>/webhook`` (reel's HTTP server; no bearer
token: the signature is the authentication) a JSON body

    {"message_id", "conversation", "sender", "text",
     "is_direct"?, "thread"?, "mentions_agent"?, "sender_name"?, "attachments"?}

with the header ``X-Reel-Signature: sha256=<hex of HMAC-SHA256(secret, raw body)>``. The
signature is checked over the exact bytes received, in constant time, before the body is
parsed; a bad or missing one is a 401 and nothing is recorded but a counter.

Outbound: each reply part is POSTed to ``outbound_url`` as JSON
``{"channel", "conversation", "thread", "text", "in_reply_to", "run_id", "part", "parts"}``,
signed the same way; any answer but 2xx is a delivery failure (recorded on
``channel.reply_sent``).

The secret comes from the environment variable ``secret_env`` names; it is never stored,
logged or echoed.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Any, Final

import aiohttp
import msgspec

from actors.channels.config import ChannelConfig
from actors.channels.message import InboundMessage, MessageBody, OutboundMessage
from transports.channels.connector import Connector, ConnectorError, Inbound, register
from transports.config import foreign_keys

SIGNATURE_HEADER: Final = "X-Reel-Signature"
SCHEME: Final = "sha256="
MIN_SECRET_BYTES: Final = 16


def sign(secret: bytes, body: bytes) -> str:
    """The header value for ``body``: ``sha256=<hex>``."""
    return SCHEME + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(secret: bytes, body: bytes, header: str | None) -> bool:
    """Whether ``header`` is the signature of ``body`` (constant time; any malformed header
    is simply wrong)."""
    if header is None:
        return False
    expected = sign(secret, body).encode()
    return hmac.compare_digest(expected, header.strip().encode("utf-8", "replace"))


class OutboundBody(msgspec.Struct, frozen=True, kw_only=True):
    """The outbound JSON body."""

    channel: str
    conversation: str
    thread: str | None
    text: str
    in_reply_to: str
    run_id: str
    part: int
    parts: int


_decode = msgspec.json.Decoder(MessageBody).decode
_encode = msgspec.json.Encoder().encode


class WebhookConnector(Connector):
    kind = "webhook"

    def __init__(
        self, name: str, config: ChannelConfig, environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(name, config, environ)
        env = os.environ if environ is None else environ
        if not config.secret_env:
            raise ConnectorError(
                "secret_env: a webhook channel needs the name of the "
                "environment variable holding its HMAC secret"
            )
        secret = env.get(config.secret_env, "")
        if len(secret.encode()) < MIN_SECRET_BYTES:
            raise ConnectorError(
                f"secret_env: the environment variable {config.secret_env} is "
                f"{'not set' if not secret else 'too short'} (at least {MIN_SECRET_BYTES} bytes)"
            )
        if config.outbound_url and not config.outbound_url.startswith(("http://", "https://")):
            raise ConnectorError("outbound_url: must be an http:// or https:// URL")
        if extra := foreign_keys(config):
            raise ConnectorError(f"{extra[0]}: a webhook channel does not take it")
        self._secret = secret.encode()
        self._session: aiohttp.ClientSession | None = None

    @property
    def can_reply(self) -> bool:
        return bool(self.config.outbound_url)

    def verify(self, body: bytes, header: str | None) -> bool:
        return verify(self._secret, body, header)

    def parse(self, body: bytes) -> InboundMessage:
        """The message in a verified body (msgspec errors name the field)."""
        return _decode(body).message(self.name)

    async def start(self, inbound: Inbound) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.outbound_timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout)

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, message: OutboundMessage) -> None:
        if self._session is None:
            raise ConnectorError("the webhook connector is not started")
        body = _encode(
            OutboundBody(
                channel=message.channel,
                conversation=message.conversation,
                thread=message.thread,
                text=message.text,
                in_reply_to=message.in_reply_to,
                run_id=message.run_id,
                part=message.part,
                parts=message.parts,
            )
        )
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(self._secret, body)}
        try:
            async with self._session.post(
                self.config.outbound_url, data=body, headers=headers
            ) as response:
                if not 200 <= response.status < 300:
                    raise ConnectorError(f"outbound_url answered HTTP {response.status}")
        except aiohttp.ClientError as exc:
            raise ConnectorError(f"outbound_url: {type(exc).__name__}") from None

    def describe(self) -> dict[str, Any]:
        return {"outbound": bool(self.config.outbound_url), "secret_env": self.config.secret_env}


register("webhook", WebhookConnector)
