"""Many followers at once: every stream gets the next commit promptly, and readers of one
backlog take turns.

500 concurrent ``Journal.Read(follow)`` streams used to wait up to 20 s for their first
envelope (each read went through a worker thread, so they queued behind each other); every
follower now shares the server's one commit signal and reads on the loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest
from grpclib.client import Channel

from actors.messages import StartRun
from proto.reel.v1 import Envelope, JournalStub, ReadJournalRequest
from tests.transports.grpc.conftest import GrpcNode, run


def follow(stub: JournalStub, after: int) -> AsyncGenerator[Envelope, None]:
    """``Journal.Read`` following from ``after``. The generated stub's method is an async
    generator, typed as an AsyncIterator: a follower closes it once it has its first row."""
    rows = stub.read(ReadJournalRequest(after_position=after, follow=True))
    return cast(AsyncGenerator[Envelope, None], rows)


FOLLOWERS = 500
CHANNELS = 10
"""HTTP/2 connections the followers are spread over (50 streams each)."""
PROMPT_S = 5.0


async def _follow(node: GrpcNode, channels: list[Channel], after: int) -> list[float]:
    """Open every follower after ``after``; once all are open, commit one run; return each
    follower's seconds from that commit to its first envelope."""
    baseline = node.server.open_streams
    started_at: list[float] = []
    firsts: list[float] = []

    async def follower(channel: Channel) -> None:
        stub = JournalStub(channel, metadata=node.metadata, timeout=30)
        rows = follow(stub, after)
        async for first in rows:
            assert first.position == after + 1
            firsts.append(time.monotonic())
            break
        await rows.aclose()

    tasks = [asyncio.create_task(follower(channels[i % CHANNELS])) for i in range(FOLLOWERS)]
    deadline = time.monotonic() + 20
    while node.server.open_streams < baseline + FOLLOWERS:  # all served and waiting
        assert time.monotonic() < deadline, f"{node.server.open_streams - baseline} opened"
        await asyncio.sleep(0.05)
    started_at.append(time.monotonic())
    await asyncio.to_thread(node.runtime.node.ask, StartRun(text="wake", create=True))
    await asyncio.wait_for(asyncio.gather(*tasks), 30)
    return [t - started_at[0] for t in firsts]


def test_500_followers_each_get_the_next_commit_promptly(node: GrpcNode) -> None:
    head = node.runtime.journal.committed_position

    async def go() -> list[float]:
        channels = [node.channel() for _ in range(CHANNELS)]
        try:
            return await _follow(node, channels, head)
        finally:
            for channel in channels:
                channel.close()

    delays = run(go())
    assert len(delays) == FOLLOWERS
    print(f"first entry after the commit: max {max(delays):.3f} s")
    assert max(delays) < PROMPT_S


SHARERS = 50
"""Readers of one backlog on one HTTP/2 connection: the client sees the server's send order."""


def test_readers_of_a_backlog_are_served_in_turn_not_one_after_another(
    node: GrpcNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many streams paging through one backlog take turns, page by page: every stream has its
    first entry before any stream has its last. A server that sent each stream's backlog in one
    go (no turn between pages, or a read queue) serves the last stream after the others' whole
    backlogs. Order, not time: the figure for 500 followers is ``bench/followers.py``'s.

    Every reader is let past its authorization only once all have arrived: on a loaded machine
    the first readers' requests could otherwise be served whole (five pages of 1, 4, 16, 64 and
    the rest) before the last ones reached the server, and that is arrival, not order."""
    for _ in range(20):  # a backlog of ~140 events: five pages for every reader
        node.runtime.node.ask(StartRun(text="backlog", create=True))
    ctx = node.server._ctx
    assert ctx is not None  # the server runs
    authorize = ctx.permit
    arrived = 0
    everyone = asyncio.Event()  # used on the server's loop only

    async def permit_once_all_arrived(action: str, scope: Any = None) -> Any:
        nonlocal arrived
        who = await authorize(action, scope)
        if action == "journal.read":
            arrived += 1
            if arrived >= SHARERS:
                everyone.set()
            await everyone.wait()
        return who

    monkeypatch.setattr(ctx, "permit", permit_once_all_arrived)
    head = node.runtime.journal.committed_position
    received = 0
    firsts: list[int] = []
    lasts: list[int] = []

    async def reader(stub: JournalStub) -> None:
        nonlocal received
        rows = follow(stub, 0)
        first = True
        async for envelope in rows:
            received += 1
            if first:
                assert envelope.position == 1
                firsts.append(received)
                first = False
            if envelope.position == head:
                lasts.append(received)
                break
        await rows.aclose()

    async def go() -> None:
        channel = node.channel()
        try:
            stub = JournalStub(channel, metadata=node.metadata, timeout=60)
            await asyncio.gather(*(reader(stub) for _ in range(SHARERS)))
        finally:
            channel.close()

    asyncio.run(asyncio.wait_for(go(), 60))
    assert len(firsts) == len(lasts) == SHARERS
    print(f"{SHARERS} readers of {head} entries: firsts by {max(firsts)}, lasts from {min(lasts)}")
    assert max(firsts) < min(lasts)
