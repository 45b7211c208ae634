"""Resume: forced disconnects at random points, a server shutdown mid-stream and a restart."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import TapeEvent
from tests.transports.grpc.conftest import SHELL_ECHO, TERMINAL, GrpcNode, run, start_node

LONG = "\n".join(["a long answer " * 12, '/tool echo {"text":"one"}', '/tool echo {"text":"two"}'])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_resume_after_forced_disconnects_has_no_gaps_and_no_repeats(
    node: GrpcNode, seed: int
) -> None:
    rng = random.Random(seed)

    async def go() -> tuple[list[TapeEvent], int]:
        got: list[TapeEvent] = []
        disconnects = 0
        channel = node.channel()
        async with node.stream(channel) as stream:
            await stream.start(LONG)
            async for event in stream.events():
                got.append(event)
                if len(got) >= rng.randint(1, 3):
                    break
        channel.close()  # forced: the connection drops with the stream open
        disconnects += 1
        while got[-1].kind not in TERMINAL:
            channel = node.channel()
            take = rng.randint(1, 6)
            async with node.stream(channel) as stream:
                await stream.resume(got[0].run_id, got[-1].tape_seq)
                async for event in stream.events():
                    got.append(event)
                    take -= 1
                    if take == 0 and event.kind not in TERMINAL:
                        break
            channel.close()
            disconnects += 1
            await asyncio.sleep(rng.random() * 0.01)
        return got, disconnects

    got, disconnects = run(go())
    assert disconnects >= 2
    assert [e.tape_seq for e in got] == list(range(len(got))), "a gap or a repeat"
    assert got[-1].kind == "run.completed"
    tape = node.runtime.views.tape(got[0].run_id, -1, 10_000)
    assert [(e.tape_seq, e.kind) for e in tape] == [(e.tape_seq, e.kind) for e in got]


def test_resuming_a_finished_run_from_its_last_entry_ends_at_once(node: GrpcNode) -> None:
    async def go() -> tuple[list[TapeEvent], list[TapeEvent]]:
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.start("done soon")
                first = [e async for e in stream.events()]
            async with node.stream(channel) as stream:
                await stream.resume(first[0].run_id, first[-1].tape_seq)
                rest = [e async for e in stream.events()]
            return first, rest
        finally:
            channel.close()

    first, rest = run(go())
    assert first[-1].kind == "run.completed" and rest == []


def test_server_shutdown_mid_stream_gives_unavailable_and_resume_works_after_restart(
    data_dir: Path,
) -> None:
    node = start_node(data_dir)
    port = node.server.port

    async def until_approval() -> tuple[list[TapeEvent], GRPCError]:
        channel = node.channel()
        got: list[TapeEvent] = []
        try:
            async with node.stream(channel) as stream:
                await stream.start(SHELL_ECHO)
                with pytest.raises(GRPCError) as caught:
                    async for event in stream.events():
                        got.append(event)
                        if event.kind == "run.awaiting_approval":
                            await asyncio.to_thread(node.server.close)
            return got, caught.value
        finally:
            channel.close()

    try:
        got, error = run(until_approval())
    finally:
        node.runtime.close(grace_s=0)
    assert error.status == Status.UNAVAILABLE
    run_id, last = got[0].run_id, got[-1].tape_seq
    assert f"resume run {run_id} with after_seq {last}" in (error.message or "")

    pending = next(e.approval_request for e in got if e.approval_request is not None)
    restarted = start_node(data_dir, port=port)

    async def resume() -> list[TapeEvent]:
        channel = restarted.channel()
        try:
            async with restarted.stream(channel) as stream:
                await stream.resume(run_id, last)
                await stream.approve(pending.approval_id)  # still pending after the restart
                return [e async for e in stream.events()]
        finally:
            channel.close()

    try:
        rest = run(resume())
    finally:
        restarted.close()
    assert [e.tape_seq for e in got + rest] == list(range(len(got) + len(rest)))
    assert rest[-1].kind == "run.completed"
    assert any(e.tool_result is not None and e.tool_result.ok for e in rest)
