"""Binding the API to a socket on the node's asyncio loop, and stopping it.

The server runs on ``runtime.node.io`` (the node's one network I/O thread), with handler
cancellation on: a client that disconnects cancels its handler (an SSE stream ends at once).
No access log is written (the token is never at risk, and the API stays fast). Requests aiohttp
cannot parse are answered by :mod:`transports.http.protocol` (JSON, never echoing the request).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from transports.http.app import build_app
from transports.http.context import CONTEXT, ApiContext
from transports.http.protocol import Runner
from transports.listen import listening_socket
from transports.runtime import Runtime

SHUTDOWN_GRACE_S = 5.0
"""How long ``stop()`` lets in-flight requests finish before cancelling them."""


class HttpStartError(Exception):
    """The API cannot listen (address in use, a host that is not this machine's); the message
    names the config keys ``http.host`` and ``http.port``."""


class HttpServer:
    """A listening API server. ``url`` is its base (``http://127.0.0.1:8470``)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self.runner = runner
        self.host = host
        self.port = port
        """The bound port (the real one when the config asked for 0)."""
        self.loop = asyncio.get_running_loop()
        self._stopped = False

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def context(self) -> ApiContext:
        """The handlers' shared state (open SSE streams, knobs)."""
        return self.runner.app[CONTEXT]

    async def stop(self) -> None:
        """Stop listening, end SSE streams, let in-flight requests finish; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.context.close_streams()
        await self.runner.cleanup()

    def close(self, timeout: float = SHUTDOWN_GRACE_S + 5.0) -> None:
        """:meth:`stop` from another thread (the daemon's), waiting for it."""
        if self.loop.is_closed() or not self.loop.is_running():
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self.loop).result(timeout)


async def serve_http(
    runtime: Runtime,
    *,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
    keepalive_s: float = 15.0,
) -> HttpServer:
    """Bind and start on the running loop; ``host``/``port`` default to ``config.http``.

    Every token of the node opens it; ``token`` replaces the data dir's ``admin.token`` as the
    admin's."""
    config = runtime.config.http
    bind_host = config.host if host is None else host
    bind_port = config.port if port is None else port
    sock = listening_socket(bind_host, bind_port, section="http", error=HttpStartError)
    try:
        app = build_app(runtime, token, keepalive_s=keepalive_s)
        runner = Runner(
            app,
            handler_cancellation=True,
            access_log=None,
            shutdown_timeout=SHUTDOWN_GRACE_S,
        )
        await runner.setup()
    except BaseException:
        sock.close()
        raise
    try:
        site = web.SockSite(runner, sock)
        await site.start()
        bound = runner.addresses[0]
    except BaseException:
        sock.close()
        await runner.cleanup()
        raise
    return HttpServer(runner, str(bound[0]), int(bound[1]))


def start_http(
    runtime: Runtime,
    *,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
    keepalive_s: float = 15.0,
    timeout: float = 30.0,
) -> HttpServer:
    """Start the API on the node's I/O loop from any other thread; returns once it listens.

    Raises HttpStartError (address in use, a host that is not this machine's) when it cannot
    bind."""
    return runtime.node.io.submit(
        serve_http(runtime, host=host, port=port, token=token, keepalive_s=keepalive_s)
    ).result(timeout)
