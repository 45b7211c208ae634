"""A real node with webhook channels on loopback, and the platform on the other side: an aiohttp
server that receives the node's replies and checks their HMAC-SHA256 signatures the way a
platform would (no reel code involved in checking)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from actors.channels.config import ChannelConfig
from events.catalog import Event, kind_of
from tests.transports.http.httpkit import HttpNode, HttpReply, close_node, eventually, open_node
from transports.channels import ChannelHub
from transports.runtime import Runtime

SECRET = "test-webhook-secret-0123456789"
SECRET_ENV = "REEL_TEST_HOOK_SECRET"


def signature(body: bytes, secret: str = SECRET) -> str:
    """What a platform sends: ``sha256=<hex HMAC-SHA256 of the raw body>``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class Received:
    body: dict[str, Any]
    raw: bytes
    signed: bool
    """The X-Reel-Signature header matched the body under the shared secret."""


@dataclass
class Receiver:
    """The platform's end of the outbound webhook, on its own loop and thread."""

    received: list[Received] = field(default_factory=list)
    status: int = 200
    """What it answers (a failing platform: 500)."""
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> Receiver:
        ready = threading.Event()

        async def handle(request: web.Request) -> web.Response:
            raw = await request.read()
            expected = signature(raw)
            signed = hmac.compare_digest(expected, request.headers.get("X-Reel-Signature", ""))
            with self._lock:
                self.received.append(Received(json.loads(raw), raw, signed))
            return web.json_response({"ok": True}, status=self.status)

        async def serve() -> None:
            app = web.Application()
            app.router.add_post("/hook", handle)
            self._runner = web.AppRunner(app)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert isinstance(server, asyncio.Server)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(serve())
            self._loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        assert ready.wait(10)
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None:
            return
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)

    def texts(self) -> list[str]:
        with self._lock:
            return [r.body["text"] for r in self.received]

    def wait(self, count: int, timeout: float = 15.0) -> list[Received]:
        """The first ``count`` deliveries, once they have arrived."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.02)
        raise AssertionError(f"expected {count} deliveries, got {self.texts()}")

    def wait_for(self, needle: str, timeout: float = 15.0) -> Received:
        """The first delivery whose text contains ``needle``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for item in self.received:
                    if needle in item.body["text"]:
                        return item
            time.sleep(0.02)
        raise AssertionError(f"no delivery containing {needle!r}; got {self.texts()}")


def channel(receiver: Receiver | None = None, **policy: Any) -> ChannelConfig:
    """A webhook channel (replies to ``receiver`` when given)."""
    return ChannelConfig(
        kind="webhook",
        secret_env=SECRET_ENV,
        outbound_url=receiver.url if receiver is not None else "",
        **policy,
    )


def channel_node(data_dir: Path, channels: dict[str, ChannelConfig], **config: Any) -> HttpNode:
    return open_node(data_dir, channels=channels, **config)


def message(
    text: str = "hello", *, mid: str | None = None, sender: str = "@alice:localhost", **rest: Any
) -> dict[str, Any]:
    """A message body as a connector or API client sends it."""
    body: dict[str, Any] = {
        "message_id": mid or f"m-{time.monotonic_ns()}",
        "conversation": rest.pop("conversation", "dm-alice"),
        "sender": sender,
        "text": text,
    }
    body.update(rest)
    return body


def route(
    node: HttpNode, name: str, body: dict[str, Any], auth: str | None = "default"
) -> HttpReply:
    return node.call("POST", f"/v1/channels/{name}/messages", body, auth=auth)


def decision(node: HttpNode, name: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = route(node, name, body)
    assert reply.status == 200, reply.body
    result: dict[str, Any] = reply.json()
    return result


def post_webhook(node: HttpNode, name: str, raw: bytes, sig: str | None) -> HttpReply:
    headers = {"Content-Type": "application/json"}
    if sig is not None:
        headers["X-Reel-Signature"] = sig
    return node.call("POST", f"/v1/channels/{name}/webhook", raw=raw, headers=headers, auth=None)


def run_of(node: HttpNode, run_id: str) -> dict[str, Any]:
    """The run once it has ended (its record may reach the views a moment after the channel
    accepted it, on a loaded machine)."""
    eventually(lambda: node.call("GET", f"/v1/runs/{run_id}").status == 200)
    node.finish(run_id)
    reply = node.call("GET", f"/v1/runs/{run_id}")
    assert reply.status == 200
    record: dict[str, Any] = reply.json()
    return record


E = TypeVar("E", bound=Event)


def events_of(node: HttpNode, cls: type[E], stream: str = "channel/hook") -> list[E]:
    """The events of class ``cls`` on ``stream`` (default the test channel's), in order."""
    kind = kind_of(cls)
    decoded = [e.decode() for e in node.runtime.journal.read_stream(stream) if e.kind == kind]
    return [e for e in decoded if isinstance(e, cls)]


__all__ = [
    "SECRET",
    "SECRET_ENV",
    "HttpNode",
    "Receiver",
    "channel",
    "channel_node",
    "close_node",
    "decision",
    "events_of",
    "message",
    "post_webhook",
    "route",
    "run_of",
    "signature",
]


def hub_of(runtime: Runtime) -> ChannelHub:
    """The channel hub of a node these tests configured channels on (so never None)."""
    assert runtime.channels is not None
    return runtime.channels
