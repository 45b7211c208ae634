"""A client that goes away mid-call: the server stops serving it quietly. grpclib logs "Failed to
handle cancellation" with a traceback whenever a cancelled handler ends any other way than by
its CancelledError; reel's guard makes every cancelled call end that way, whatever the handler
did with the cancellation."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse
from grpclib.server import Server

from tests.transports.grpc.conftest import GrpcNode, start_node
from tests.transports.records import Records
from transports.grpc.guard import guard_calls

STREAMS = 500
CHANNELS = 10


def test_many_run_streams_dropped_at_once_log_no_traceback(tmp_path: Path) -> None:
    """500 RunStreams of short runs, the connections closed while some runs are still starting,
    some streaming and some ending: every handler ends without a traceback or an error line."""
    node = start_node(tmp_path / "data")
    try:
        with Records() as log:
            asyncio.run(asyncio.wait_for(_drop_streams(node), 120))
            wait_until(lambda: node.server.open_streams == 0)
            node.runtime.node.io.submit(asyncio.sleep(0)).result(10)  # the last handler's step
        faults = log.faults()
        assert not faults, [(r.name, r.getMessage()[:200]) for r in faults][:20]
        assert any("cancelled" in r.getMessage() for r in log.records), "nothing was cancelled"
    finally:
        node.close()


async def _drop_streams(node: GrpcNode) -> None:
    channels = [node.channel() for _ in range(CHANNELS)]
    first_events = 0

    async def follow(channel: Channel) -> None:
        nonlocal first_events
        async with node.stream(channel) as stream:
            await stream.start("hi")
            async for _ in stream.events():
                first_events += 1
                await asyncio.Event().wait()  # read no more: the drop ends it

    tasks = [asyncio.create_task(follow(channels[i % CHANNELS])) for i in range(STREAMS)]
    while first_events < STREAMS // 3:
        await asyncio.sleep(0.01)
    for channel in channels:
        channel.close()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def wait_until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the server's handlers did not end"
        time.sleep(0.02)


# --- the guard, whatever a handler does with its cancellation ----------------------------------


async def _swallow(stream: Any) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(60)


async def _replace_with_status(stream: Any) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        raise GRPCError(Status.UNAVAILABLE, "going away") from None


async def _replace_with_bug(stream: Any) -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        raise RuntimeError("a cleanup that fails") from None


METHOD = "/test.Guarded/Call"


@contextlib.asynccontextmanager
async def guarded_call(
    handler: Callable[[Any], Awaitable[None]],
) -> AsyncIterator[tuple[Any, Channel]]:
    """A bare grpclib server whose one server-streaming method is ``handler``, its calls
    guarded as reel's (:func:`guard_calls`): yields a call to it, its request sent, and the
    channel of its own it runs on. The server is closed after the block, then the channel."""

    class Service:
        def __mapping__(self) -> dict[str, Handler]:
            return {
                METHOD: Handler(
                    handler, Cardinality.UNARY_STREAM, HealthCheckRequest, HealthCheckResponse
                )
            }

    server = Server([Service()])
    guard_calls(server, {METHOD: Cardinality.UNARY_STREAM})
    await server.start("127.0.0.1", 0)
    assert isinstance(server._server, asyncio.Server)
    channel = Channel("127.0.0.1", server._server.sockets[0].getsockname()[1])
    try:
        async with channel.request(
            METHOD, Cardinality.UNARY_STREAM, HealthCheckRequest, HealthCheckResponse
        ) as call:
            await call.send_message(HealthCheckRequest(), end=True)
            yield call, channel
    finally:
        server.close()
        await server.wait_closed()
        channel.close()


@pytest.mark.parametrize("after", [_swallow, _replace_with_status, _replace_with_bug])
def test_a_handler_that_does_not_end_by_its_cancellation_logs_no_traceback(
    after: Callable[[Any], Awaitable[None]],
) -> None:
    async def scenario() -> None:
        ready = asyncio.Event()

        async def handler(stream: Any) -> None:
            await stream.recv_message()
            await stream.send_message(HealthCheckResponse())
            ready.set()
            await after(stream)

        async with guarded_call(handler) as (call, _channel):
            await call.recv_message()
            await ready.wait()
            await call.cancel()
            await asyncio.sleep(0.2)  # the server's handler hears the reset and ends

    with Records() as log:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    assert not log.faults(), log.text()
    assert any(r.getMessage().startswith("Request was cancelled") for r in log.records), log.text()


def test_a_handler_sending_to_a_connection_gone_stops_without_a_warning_per_write() -> None:
    """A handler that sends without waiting (a follower paging through a backlog) while its
    client's connection is gone: without the guard's check every write after the fourth logged
    asyncio's "socket.send() raised exception." (bench/followers.py printed ~2,000 of them). The
    handler is held past the client's close, then sends two messages with a pause between them
    for the peer's reset to arrive, then a page of 200."""

    async def scenario() -> tuple[int, BaseException | None]:
        closed = asyncio.Event()
        sent = 0
        ended: list[BaseException | None] = []

        async def handler(stream: Any) -> None:
            nonlocal sent
            await stream.recv_message()
            await stream.send_message(HealthCheckResponse())
            await closed.wait()
            try:
                await stream.send_message(HealthCheckResponse())  # the peer answers with a reset
                time.sleep(0.1)  # blocking: the loop must not hear of the close meanwhile
                for _ in range(200):
                    await stream.send_message(HealthCheckResponse())
                    sent += 1
            except BaseException as exc:
                ended.append(exc)
                raise
            ended.append(None)

        with contextlib.suppress(StreamTerminatedError, ConnectionError):
            async with guarded_call(handler) as (call, channel):
                await call.recv_message()
                channel.close()  # the connection, not the stream: as a process that exits
                await asyncio.sleep(0)  # the socket closes
                closed.set()
                await asyncio.sleep(0.5)  # the server's handler ends
        return sent, ended[0] if ended else None

    with Records() as log:
        sent, ended = asyncio.run(asyncio.wait_for(scenario(), 30))
    flood = [r for r in log.records if "socket.send() raised exception" in r.getMessage()]
    assert flood == [], f"{len(flood)} warnings after {sent} sends"
    assert sent < 200 and isinstance(ended, StreamTerminatedError | asyncio.CancelledError), ended
    assert not log.faults(), log.text()
