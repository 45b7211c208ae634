"""Fixtures for the tools tests: a workspace directory and a real aiohttp server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.tools.sandboxkit import require_sandbox


@pytest.fixture
def sandbox_required() -> None:
    """Tests that run programs in bubblewrap: skip without it (fail under make test)."""
    require_sandbox()


@pytest.fixture
def public_tmp() -> Iterator[Path]:
    """A directory every user may search (pytest's ``tmp_path`` lies under a 0700 one), for
    what the sandbox's unprivileged user must reach: ``shell_path`` directories, staged code."""
    path = Path(tempfile.mkdtemp(prefix="reel-test-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


class LoopbackServer:
    """An aiohttp app served from its own thread and event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(10)

    def stop(self) -> None:
        """Stop serving and end every task of the loop: a handler still waiting (a gate of
        :mod:`tests.actors.runs.readserver` nobody filled) left pending on a dropped loop was
        logged "Task was destroyed but it is pending!" whenever the collector found it, in
        whichever test ran then, and failed that test's no-error-log check."""

        async def shutdown() -> None:
            assert self._runner is not None
            await self._runner.cleanup()
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/hello", self._hello)
        app.router.add_get("/big", self._big)
        app.router.add_get("/sleep", self._sleep)
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/binary", self._binary)
        app.router.add_post("/echo", self._echo)
        app.router.add_get("/headers", self._headers)
        app.router.add_get("/missing", self._missing)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        self.port = server.sockets[0].getsockname()[1]

    async def _hello(self, request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def _big(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(64):
            await resp.write(b"x" * 16384)
        await resp.write_eof()
        return resp

    async def _sleep(self, request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.Response(text="late")

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _binary(self, request: web.Request) -> web.Response:
        return web.Response(body=b"ok \xff\xfe", content_type="application/octet-stream")

    async def _echo(self, request: web.Request) -> web.Response:
        return web.Response(body=await request.read())

    async def _headers(self, request: web.Request) -> web.Response:
        return web.json_response({k: v for k, v in request.headers.items()})

    async def _missing(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="nope")


@pytest.fixture
def http_server() -> Iterator[LoopbackServer]:
    server = LoopbackServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
