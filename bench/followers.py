"""gRPC: how soon 500 ``Journal.Read`` followers of one backlog each get their first entry.

In one invocation, one process (the clients share the process, as in the test suite):

- A node (``open_runtime`` on a temp data dir, deterministic provider) with its gRPC server on
  the node's I/O loop thread; ``--runs`` runs make the backlog.
- ``reel``: ``--followers`` ``Journal.Read(after_position=0, follow=true)`` streams, spread over
  ``--channels`` HTTP/2 connections, all opened at once; each closes after its first envelope.
  From opening to each first envelope: p50 and max.
- ``ceiling``: a bare grpclib server on its own loop thread, one server-streaming method that
  sends every stream the journal's first envelope, prebuilt, and nothing more: the transport
  alone, no journal reads, no authentication, no policy, no backlog. Same followers, same
  channels.

reel also pages each follower on through the backlog (the streams take turns, page by page) and
this client receives those pages before it sees later streams' first entries, so the figure
grows with the backlog. Target: reel's max within 2x the ceiling's (ratio >= 0.5). Printed as
PASS/MISS, never asserted. Run: ``.venv/bin/python bench/followers.py`` (about 30 s). The test
suite checks the order (readers take turns), not this time:
``tests/transports/grpc/test_grpc_followers.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from grpclib.client import Channel
from grpclib.const import Cardinality, Handler
from grpclib.server import Server, Stream

from actors.messages import StartRun
from bench.grpc_stream import LoopThread, server_port
from proto.reel.v1 import Envelope, JournalStub, ReadJournalRequest
from transports.grpc import start_grpc
from transports.grpc.client import auth_metadata
from transports.grpc.records import envelope_message
from transports.runtime import open_runtime

READ_METHOD = "/bench.Journal/Read"


class EchoJournal:
    """The ceiling: sends each reader the first envelope, prebuilt, then holds the stream open
    until the reader leaves (the least any server does for a follower's first entry)."""

    def __init__(self, first: Envelope) -> None:
        self.first = first

    async def read(self, stream: Stream[ReadJournalRequest, Envelope]) -> None:
        await stream.recv_message()
        await stream.send_message(self.first)
        await asyncio.Event().wait()  # cancelled when the reader resets the stream

    def __mapping__(self) -> dict[str, Handler]:
        return {
            READ_METHOD: Handler(self.read, Cardinality.UNARY_STREAM, ReadJournalRequest, Envelope)
        }


async def reel_first(channel: Channel, metadata: dict[str, str]) -> None:
    stub = JournalStub(channel, metadata=metadata, timeout=120)
    rows = stub.read(ReadJournalRequest(after_position=0, follow=True))
    async for _ in rows:
        break
    await cast(Any, rows).aclose()


async def echo_first(channel: Channel, metadata: dict[str, str]) -> None:
    async with channel.request(
        READ_METHOD, Cardinality.UNARY_STREAM, ReadJournalRequest, Envelope, timeout=120
    ) as stream:
        await stream.send_message(ReadJournalRequest(), end=True)
        await stream.recv_message()
        await stream.cancel()


async def firsts(
    port: int,
    followers: int,
    channels: int,
    first: Callable[[Channel, dict[str, str]], Any],
    metadata: dict[str, str],
) -> list[float]:
    """Seconds from opening all followers to each one's first envelope."""
    open_channels = [Channel("127.0.0.1", port) for _ in range(channels)]
    opened = time.perf_counter()
    out: list[float] = []

    async def one(channel: Channel) -> None:
        await first(channel, metadata)
        out.append(time.perf_counter() - opened)

    try:
        await asyncio.wait_for(
            asyncio.gather(*(one(open_channels[i % channels]) for i in range(followers))), 300
        )
    finally:
        for channel in open_channels:
            channel.close()
    if len(out) != followers:
        raise SystemExit(f"only {len(out)} of {followers} followers had a first envelope")
    return out


async def _echo_server(first: Envelope) -> Server:
    server = Server([EchoJournal(first)])
    await server.start("127.0.0.1", 0)
    return server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs that make the backlog")
    parser.add_argument("--followers", type=int, default=500)
    parser.add_argument("--channels", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds; medians")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="reel-bench-followers-"))
    runtime = open_runtime(data)
    try:
        server = start_grpc(runtime, port=0)
        metadata = auth_metadata((data / "admin.token").read_text().strip())
        for _ in range(args.runs):
            runtime.node.ask(StartRun(text="backlog", create=True))
        head = runtime.journal.committed_position
        echo_loop = LoopThread()
        echo: Server = echo_loop.run(_echo_server(envelope_message(runtime.journal.read(0, 1)[0])))
        echo_port: int = echo_loop.run(server_port(echo))
        print(f"backlog {head} entries; {args.followers} followers on {args.channels} channels")
        maxima: dict[str, list[float]] = {"ceiling": [], "reel": []}
        for round_ in range(args.rounds):
            for name, port, first in (
                ("ceiling", echo_port, echo_first),
                ("reel", server.port, reel_first),
            ):
                delays = asyncio.run(firsts(port, args.followers, args.channels, first, metadata))
                maxima[name].append(max(delays))
                print(
                    f"round {round_ + 1} {name:8s} first entry p50 "
                    f"{statistics.median(delays):.3f} s, max {max(delays):.3f} s"
                )
        reel, ceiling = statistics.median(maxima["reel"]), statistics.median(maxima["ceiling"])
        ratio = ceiling / reel
        verdict = "PASS" if ratio >= 0.5 else "MISS"
        print(f"median max: reel {reel:.3f} s, ceiling {ceiling:.3f} s")
        print(f"{verdict}: ceiling/reel {ratio:.2f} (target >= 0.5)")
        echo.close()
        echo_loop.stop()
        server.close()
    finally:
        runtime.close(grace_s=0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
