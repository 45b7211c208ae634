"""A loopback HTTP server whose GETs are slow reads that prove what ran at once, without a
clock: ``http.fetch`` calls of a run meet here.

- ``/gate?group=G&of=N&n=K`` waits until N requests of group G are in flight at once (or gives
  up after ``GATE_S``, counted in ``gave_up``), then answers them in reverse order of ``n``:
  the highest first, each of the others once every higher one was answered. Sequential calls
  can never fill a gate of two or more; calls run at once finish in reverse proposal order.
- ``/hold?n=K`` answers once ``release()`` is called (or after ``HOLD_S``).
- ``/plain?n=K`` answers at once.

Every answer's body is ``read K``. ``max_in_flight`` is the most requests in flight at once,
``answered`` the order of the answers (by ``n``), ``seen`` the order of arrivals.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from aiohttp import web

from tests.tools.conftest import LoopbackServer

GATE_S = 20.0
HOLD_S = 60.0


class ReadServer(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.max_in_flight = 0
        self.seen: list[int] = []
        self.answered: list[int] = []
        self.gave_up = 0
        self._groups: dict[str, set[int]] = defaultdict(set)
        self._changed: asyncio.Condition | None = None
        self._released: asyncio.Event | None = None

    def url(self, path: str, n: int, **query: object) -> str:
        extra = "".join(f"&{k}={v}" for k, v in query.items())
        return f"{self.base}/{path}?n={n}{extra}"

    def release(self) -> None:
        """Answer every held request, and every later one at once."""
        released = self._released
        assert released is not None, "start the server first"
        self.loop.call_soon_threadsafe(released.set)

    async def _start(self) -> None:
        self._changed = asyncio.Condition()
        self._released = asyncio.Event()
        app = web.Application()
        app.router.add_get("/gate", self._gate)
        app.router.add_get("/hold", self._hold)
        app.router.add_get("/plain", self._plain)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        assert isinstance(site._server, asyncio.Server)
        self.port = site._server.sockets[0].getsockname()[1]

    async def _arrive(self, n: int) -> None:
        assert self._changed is not None
        async with self._changed:
            self.seen.append(n)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._changed.notify_all()

    async def _answer(self, n: int) -> web.Response:
        assert self._changed is not None
        async with self._changed:
            self.in_flight -= 1
            self.answered.append(n)
            self._changed.notify_all()
        return web.Response(text=f"read {n}")

    async def _gate(self, request: web.Request) -> web.Response:
        assert self._changed is not None
        n, group, size = int(request.query["n"]), request.query["group"], int(request.query["of"])
        await self._arrive(n)
        members = self._groups[group]
        async with self._changed:
            members.add(n)
            self._changed.notify_all()
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: len(members) >= size), GATE_S)
                higher = {m for m in members if m > n}
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: higher <= set(self.answered)), GATE_S
                )
            except TimeoutError:
                self.gave_up += 1
        return await self._answer(n)

    async def _hold(self, request: web.Request) -> web.Response:
        assert self._released is not None
        n = int(request.query["n"])
        await self._arrive(n)
        try:
            await asyncio.wait_for(self._released.wait(), HOLD_S)
        except TimeoutError:
            self.gave_up += 1
        return await self._answer(n)

    async def _plain(self, request: web.Request) -> web.Response:
        n = int(request.query["n"])
        await self._arrive(n)
        return await self._answer(n)
