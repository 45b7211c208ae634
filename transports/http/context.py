"""What every handler needs from the running node, kept on the aiohttp application."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from projections import Views
from projections.follow import Signal
from transports.access.authority import AccessError, Authority, Scope
from transports.access.tokens import Credentials
from transports.http.failures import ApiError
from transports.http.freshness import views_reach
from transports.runtime import Runtime

R = TypeVar("R")
T = TypeVar("T")

COMMAND_TIMEOUT_S = 30.0
"""An actor answers a command at once (work continues after the reply); longer means trouble."""


@dataclass
class ApiContext:
    """The node behind the API, who may do what, and the knobs tests and benchmarks turn."""

    runtime: Runtime
    authority: Authority
    """Authentication (bearer tokens) and Cedar decisions on API actions."""
    views: Views
    """The API's own read connections to views.db."""
    keepalive_s: float = 15.0
    """Seconds between SSE keep-alive comments when a stream has nothing to say."""
    freshness_s: float = 2.0
    """How long a read waits for the views to include the latest commit before answering."""
    applied: Signal | None = None
    """Notified after each projector batch (set when the server starts on its loop): every
    SSE follower waits on it."""
    streams: int = 0
    """Open SSE responses (``reel_http_sse_streams``)."""
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the server stops: open SSE streams end."""
    verify_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    """One journal verification at a time: it reads the whole journal."""

    def close_streams(self) -> None:
        """End every open SSE stream (at its next loop turn): the server is stopping."""
        self.closing.set()
        if self.applied is not None:
            self.applied.notify(0)

    async def command(self, command: Any) -> Any:
        """Send ``command`` to the node and await its reply (errors are the actors' own)."""
        future = self.runtime.node.send(command)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), COMMAND_TIMEOUT_S)
        except TimeoutError:
            raise ApiError("unavailable", "the node did not answer in time") from None

    async def scope(self, build: Callable[[], Scope]) -> Scope:
        """``build()`` (a scope of :class:`Authority`): on a miss while the views lag the
        journal, wait for them and build again (a 404 when the resource does not exist)."""
        try:
            return build()
        except AccessError:
            await self.caught_up(latest=True)
        return build()

    def readable(
        self, who: Credentials, action: str, items: list[T], scope: Callable[[T], Scope]
    ) -> list[T]:
        """The items of an authorized list that ``who`` may read (one gone meanwhile: not)."""
        out = []
        for item in items:
            try:
                if self.authority.may(who, action, scope(item)):
                    out.append(item)
            except AccessError:
                continue
        return out

    async def caught_up(self, latest: bool = False) -> bool:
        """Wait until the views include every committed event (bounded by ``freshness_s``).
        ``latest``: every event committed on any node of a cluster by now
        (:meth:`Runtime.latest_position`)."""
        runtime = self.runtime
        position = (
            await runtime.latest_position(self.freshness_s)
            if latest
            else runtime.journal.committed_position
        )
        return await views_reach(runtime.projector, position, self.freshness_s)

    async def fresh(self, read: Callable[[], R | None]) -> R | None:
        """``read()``; on a miss, wait for the views to include every event committed by now
        (on any node) and read again (a run started over gRPC a moment ago, or through
        another node, is found over HTTP too)."""
        row = read()
        if row is None:
            await self.caught_up(latest=True)
            row = read()
        return row

    async def appear(self, read: Callable[[], R | None]) -> R | None:
        """``read()`` until it finds the row, waiting for projector batches in between (at most
        ``freshness_s``). For a write whose event commits just after the command's reply: the
        directory answers a new session before the session actor has appended it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.freshness_s
        projector = self.runtime.projector
        while True:
            row = read()
            remaining = deadline - loop.time()
            if row is not None or remaining <= 0:
                return row
            await views_reach(projector, projector.position + 1, min(remaining, 0.05))


CONTEXT = web.AppKey("reel_api", ApiContext)

CALLER = web.RequestKey("reel_caller", Credentials)
"""The request key under which the guard leaves the caller's :class:`Credentials`."""


def caller(request: web.Request) -> Credentials:
    """Who sent ``request`` (the guard authenticated it before any handler runs)."""
    who = request.get(CALLER)
    if not isinstance(who, Credentials):
        raise ApiError("unauthenticated", "a valid bearer token is required")
    return who


async def permit(request: web.Request, action: str, scope: Scope | None = None) -> Credentials:
    """The caller, once Cedar permits ``action`` on ``scope`` for them (else a 403)."""
    who = caller(request)
    await request.app[CONTEXT].authority.permit(who, action, scope)
    return who
