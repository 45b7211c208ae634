"""The gRPC server of a running node: grpclib on the node's I/O loop.

``start_grpc(runtime)`` binds ``grpc.host:grpc.port`` (default 127.0.0.1:8471) and serves
reel.v1.Gateway, reel.v1.Approvals, reel.v1.Journal, grpc.health.v1.Health and server reflection
(v1 and v1alpha). While the node drains, ``GrpcServer.mark_draining()`` turns health to
NOT_SERVING and the listener stays up. ``GrpcServer.close()`` must run *before*
``runtime.close()`` (the node's loop stops with the node): it marks health NOT_SERVING, ends open
streams with UNAVAILABLE (they resume after a restart), then stops the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from grpclib.health.check import ServiceStatus
from grpclib.health.service import Health
from grpclib.reflection.service import ServerReflection
from grpclib.server import Server

from projections import Views
from projections.follow import Signal
from transports.grpc.approvals import ApprovalsService
from transports.grpc.authentication import require_token
from transports.grpc.codec import CappedProtoCodec
from transports.grpc.context import ServiceContext
from transports.grpc.errors import GrpcStartError
from transports.grpc.expired import install as quiet_expired_deadlines
from transports.grpc.gateway import GatewayService
from transports.grpc.guard import guard_calls
from transports.grpc.journal import JournalService
from transports.grpc.reflection import reflection_pool
from transports.grpc.version import announce_version
from transports.listen import listening_socket
from transports.runtime import Runtime

START_TIMEOUT_S = 10.0


class GrpcServer:
    """One node's gRPC listener. ``start()``/``close()`` are called from any thread except the
    node's I/O loop; the server itself runs on that loop."""

    @property
    def open_streams(self) -> int:
        """Long-lived streams being served now (RunStream, Watch, Read with follow)."""
        return len(self._ctx.streams) if self._ctx is not None else 0

    def __init__(
        self,
        runtime: Runtime,
        *,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        max_message_bytes: int | None = None,
    ) -> None:
        config = runtime.config.grpc
        self.runtime = runtime
        self.host = host if host is not None else config.host
        self.port = port if port is not None else config.port
        """The bound port once started (useful with port 0)."""
        self.max_message_bytes = max_message_bytes or config.max_message_bytes
        self._authority = (
            runtime.authority if token is None else runtime.authority.with_admin_token(token)
        )
        self._server: Server | None = None
        self._ctx: ServiceContext | None = None
        self._health = ServiceStatus()
        self._unsubscribe: list[Callable[[], None]] = []

    @property
    def address(self) -> str:
        """``host:port`` clients connect to."""
        return f"{self.host}:{self.port}"

    def start(self) -> GrpcServer:
        """Bind and start serving; raises GrpcStartError with one clear line."""
        sock = listening_socket(self.host, self.port, section="grpc", error=GrpcStartError)
        self.port = int(sock.getsockname()[1])
        try:
            self.runtime.node.io.submit(self._start(sock)).result(START_TIMEOUT_S)
        except BaseException:
            sock.close()
            raise
        return self

    async def _start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        runtime = self.runtime
        ctx = ServiceContext(
            runtime=runtime,
            authority=self._authority,
            views=Views(runtime.views.path, runtime.views.limits),
            applied=Signal(loop, runtime.projector.hurry),
            committed=Signal(loop),
            shutdown=loop.create_future(),
        )
        services: list[Any] = [GatewayService(ctx), ApprovalsService(ctx), JournalService(ctx)]
        health = Health({service: [self._health] for service in services})
        servable = ServerReflection.extend([*services, health], pool=reflection_pool())
        quiet_expired_deadlines()
        server = Server(servable, codec=CappedProtoCodec(self.max_message_bytes))
        require_token(server, self._authority)
        announce_version(server)
        guard_calls(
            server,
            {
                path: handler.cardinality
                for service in servable
                for path, handler in service.__mapping__().items()
            },
        )
        self._unsubscribe = [
            runtime.projector.listen(ctx.applied.notify),
            runtime.journal.listen(ctx.committed.notify),
        ]
        await server.start(sock=sock)
        self._health.set(True)
        self._server, self._ctx = server, ctx

    def mark_draining(self) -> None:
        """Health answers NOT_SERVING from now on while the listener stays up: the node is
        draining (it refuses new runs, streams of live runs go on). Any thread but the loop's."""
        io = self.runtime.node.io
        if self._server is None or io.loop.is_closed() or not io.loop.is_running():
            return

        async def not_serving() -> None:
            self._health.set(False)

        with contextlib.suppress(FutureTimeout, RuntimeError):
            io.submit(not_serving()).result(5.0)

    def close(self, grace_s: float = 2.0) -> None:
        """Stop serving: open streams end with UNAVAILABLE, then the listener closes.
        Idempotent; a no-op when the node's loop is already gone."""
        if self._server is None:
            return
        io = self.runtime.node.io
        if io.loop.is_closed() or not io.loop.is_running():
            self._server = None
            return
        with contextlib.suppress(FutureTimeout, RuntimeError):
            io.submit(self._close(grace_s)).result(grace_s + 10.0)

    async def _close(self, grace_s: float) -> None:
        server, ctx = self._server, self._ctx
        self._server = None
        if server is None or ctx is None:
            return
        self._health.set(False)
        if not ctx.shutdown.done():
            ctx.shutdown.set_result(None)
        if ctx.streams:
            await asyncio.wait(set(ctx.streams), timeout=grace_s)
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        server.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 5.0)
        ctx.views.close()


def start_grpc(
    runtime: Runtime,
    *,
    host: str | None = None,
    port: int | None = None,
    token: str | None = None,
) -> GrpcServer:
    """Start the node's gRPC server (address from ``runtime.config.grpc`` unless given)."""
    return GrpcServer(runtime, host=host, port=port, token=token).start()
