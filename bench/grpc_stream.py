"""gRPC: tape entries/s over RunStream next to a bare grpclib ceiling, and run latency.

In one invocation, one process:

- A node (``open_runtime`` on a temp data dir, deterministic provider) with its gRPC server on
  the node's I/O loop thread. ``--runs`` finished runs are prepared whose tapes are long (each
  proposes ``--calls`` builtin ``echo`` calls in one turn).
- ``reel``: clients resume those finished runs from the start (``resume{after_seq: -1}``) over
  RunStream, again and again for ``--seconds``: the server reads each tape from the tape view
  and maps every entry to a ``TapeEvent``. Entries/s delivered, with 1 client and with
  ``--clients`` concurrent clients (each its own stream on a shared channel per 10 clients).
- ``ceiling``: a bare grpclib server on its own loop thread, one bidi method of the same
  message types (``RunStreamRequest`` in, ``TapeEvent`` out) that answers each request by
  echoing the same tapes' ``TapeEvent`` messages, prebuilt in memory: the transport alone, no
  views, no mapping. Same clients, same duration.
- ``latency``: ``--latency-runs`` runs started over RunStream one after another, each a
  deterministic run with one tool call (``/tool echo``); from sending ``start`` to receiving
  the ``done`` status: p50 and p99.

Target: reel >= 50% of the ceiling at 1 and at ``--clients`` clients. Printed as PASS/MISS,
never asserted. Run: ``.venv/bin/python bench/grpc_stream.py`` (about 30 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.const import Cardinality, Handler
from grpclib.server import Server, Stream

from proto.reel.v1 import ResumeRun, RunStreamRequest, TapeEvent
from transports.config import NodeConfig, RunsConfig
from transports.grpc import RunStreamClient, start_grpc
from transports.grpc.tape import tape_event
from transports.runtime import open_runtime

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

ECHO_METHOD = "/bench.Echo/RunStream"


class EchoService:
    """The ceiling: a bidi method that streams prebuilt TapeEvents back for each request."""

    def __init__(self, tapes: list[list[TapeEvent]]) -> None:
        self.tapes = tapes

    async def run_stream(self, stream: Stream[RunStreamRequest, TapeEvent]) -> None:
        request = await stream.recv_message()
        index = 0
        if request is not None and request.resume is not None:
            index = int(request.resume.run_id) % len(self.tapes)
        for event in self.tapes[index]:
            await stream.send_message(event)

    def __mapping__(self) -> dict[str, Handler]:
        return {
            ECHO_METHOD: Handler(
                self.run_stream, Cardinality.STREAM_STREAM, RunStreamRequest, TapeEvent
            )
        }


class LoopThread:
    """An asyncio loop on its own thread, like the node's I/O loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Awaitable[Any]) -> Any:
        async def wrap() -> Any:
            return await coro

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


async def reel_stream(channel: Channel, token: str, run_id: str) -> int:
    async with RunStreamClient(channel, token) as stream:
        await stream.resume(run_id, None)
        count = 0
        async for _ in stream.events():
            count += 1
        return count


async def echo_stream(channel: Channel, index: int) -> int:
    async with channel.request(
        ECHO_METHOD, Cardinality.STREAM_STREAM, RunStreamRequest, TapeEvent
    ) as stream:
        await stream.send_message(RunStreamRequest(resume=ResumeRun(run_id=str(index))), end=True)
        count = 0
        async for _ in stream:
            count += 1
        return count


async def throughput(
    clients: int,
    seconds: float,
    connect: Callable[[], Channel],
    one: Callable[[Channel, int], Awaitable[int]],
) -> float:
    channels = [connect() for _ in range((clients + 9) // 10)]
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()

    async def client(n: int) -> int:
        total, i = 0, n
        while time.perf_counter() < deadline:
            total += await one(channels[n // 10], i)
            i += clients
        return total

    try:
        totals = await asyncio.gather(*(client(n) for n in range(clients)))
    finally:
        for channel in channels:
            channel.close()
    return sum(totals) / (time.perf_counter() - started)


async def latency(port: int, token: str, runs: int) -> list[float]:
    channel = Channel("127.0.0.1", port)
    out = []
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            async with RunStreamClient(channel, token) as stream:
                await stream.start('/tool echo {"text":"hi"}')
                async for event in stream.events():
                    if event.kind == "run.completed":
                        out.append(time.perf_counter() - t0)
    finally:
        channel.close()
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--calls", type=int, default=24)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--latency-runs", type=int, default=200)
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="reel-bench-grpc-"))
    config = NodeConfig(runs=RunsConfig(max_tool_calls=args.calls + 1))
    runtime = open_runtime(data, config=config)
    server = start_grpc(runtime, port=0)
    token = (data / "admin.token").read_text().strip()
    text = "\n".join(["bench"] + [f'/tool echo {{"text":"call {n}"}}' for n in range(args.calls)])
    run_ids = []
    for _ in range(args.runs):
        events = asyncio.run(_start(server.port, token, text))
        run_ids.append(events[0].run_id)
    tapes = [[tape_event(e) for e in runtime.views.tape(r, -1, 100_000)] for r in run_ids]
    per_tape = statistics.mean(len(t) for t in tapes)

    echo_loop = LoopThread()
    echo: Server = echo_loop.run(_echo_server(tapes))
    echo_port = echo_loop.run(server_port(echo))

    def reel_one(channel: Channel, i: int) -> Awaitable[int]:
        return reel_stream(channel, token, run_ids[i % len(run_ids)])

    print(f"tapes: {len(tapes)} finished runs, {per_tape:.0f} entries each")
    results: dict[tuple[str, int], float] = {}
    for clients in (1, args.clients):
        for name, port, one in (
            ("ceiling", echo_port, echo_stream),
            ("reel", server.port, reel_one),
        ):

            def connect(port: int = port) -> Channel:
                return Channel("127.0.0.1", port)

            rate = asyncio.run(throughput(clients, args.seconds, connect, one))
            results[(name, clients)] = rate
            print(f"{name:8s} {clients:3d} client(s)  {rate:10,.0f} tape entries/s")
        ratio = results[("reel", clients)] / results[("ceiling", clients)]
        verdict = "PASS" if ratio >= 0.5 else "MISS"
        print(f"{verdict}     {clients:3d} client(s)  reel / ceiling = {ratio:.2f} (target 0.50)")

    times = asyncio.run(latency(server.port, token, args.latency_runs))
    print(
        f"latency  start -> done, one tool call, {len(times)} runs one after another: "
        f"p50 {pct(times, 0.5) * 1000:.1f} ms   p99 {pct(times, 0.99) * 1000:.1f} ms   "
        f"max {max(times) * 1000:.1f} ms"
    )
    echo_loop.run(_close(echo))
    echo_loop.stop()
    server.close()
    runtime.close(grace_s=0)
    return 0


async def _start(port: int, token: str, text: str) -> list[TapeEvent]:
    channel = Channel("127.0.0.1", port)
    try:
        async with RunStreamClient(channel, token) as stream:
            await stream.start(text)
            return [e async for e in stream.events()]
    finally:
        channel.close()


async def _echo_server(tapes: list[list[TapeEvent]]) -> Server:
    server = Server([EchoService(tapes)])
    await server.start("127.0.0.1", 0)
    return server


async def server_port(server: Server) -> int:
    """The port a started grpclib ``server`` listens on (the ceilings bind port 0)."""
    assert isinstance(server._server, asyncio.Server)  # grpclib's, private: bench only
    return int(server._server.sockets[0].getsockname()[1])


async def _close(server: Server) -> None:
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    raise SystemExit(main())
