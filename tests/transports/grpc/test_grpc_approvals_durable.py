"""A decision over gRPC is answered once it is durable, not when the approved tool finishes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import (
    ApprovalsStub,
    Decision,
    GatewayStub,
    GetRunRequest,
    ResolveApprovalRequest,
)
from proto.reel.v1 import RunState as RunStateMessage
from tests.transports.grpc.conftest import GrpcNode, run, start_node

SLEEP = '/tool shell.run {"argv": ["sleep", "20"]}'


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[GrpcNode]:
    node = start_node(tmp_path / "data", shell=("sleep",))
    try:
        yield node
    finally:
        node.close()


def test_approvals_resolve_answers_while_the_tool_runs(sleeper: GrpcNode) -> None:
    async def scenario() -> None:
        channel = sleeper.channel()
        approvals = ApprovalsStub(channel, metadata=sleeper.metadata)
        gateway = GatewayStub(channel, metadata=sleeper.metadata)
        try:
            async with sleeper.stream(channel) as stream:
                await stream.start(SLEEP)
                async for event in stream.events():
                    if event.approval_request is not None:
                        approval_id = event.approval_request.approval_id
                        started = time.monotonic()
                        reply = await approvals.resolve(
                            ResolveApprovalRequest(approval_id=approval_id, decision=Decision.ALLOW)
                        )
                        assert reply.resolved and time.monotonic() - started < 5
                    if event.kind == "run.resumed":  # the tool is running now
                        started = time.monotonic()
                        with pytest.raises(GRPCError) as refused:
                            await approvals.resolve(
                                ResolveApprovalRequest(
                                    approval_id=approval_id, decision=Decision.DENY
                                )
                            )
                        assert refused.value.status == Status.FAILED_PRECONDITION
                        assert time.monotonic() - started < 5
                        state = await gateway.get_run(GetRunRequest(run_id=event.run_id))
                        assert state.state == RunStateMessage.IN_PROGRESS
                        await stream.cancel()
                    if event.kind == "run.cancelled":
                        return
            raise AssertionError("the run was not cancelled while its tool ran")
        finally:
            channel.close()

    run(scenario())


def test_an_approval_on_the_run_stream_is_applied_while_the_tool_runs(sleeper: GrpcNode) -> None:
    async def scenario() -> None:
        channel = sleeper.channel()
        try:
            async with sleeper.stream(channel) as stream:
                await stream.start(SLEEP)
                async for event in stream.events():
                    if event.approval_request is not None:
                        started = time.monotonic()
                        await stream.approve(event.approval_request.approval_id)
                    if event.approval_resolution is not None:
                        assert time.monotonic() - started < 5
                        # a second decision on the stream is refused at once, the stream goes on
                        await stream.approve(event.approval_resolution.approval_id, allow=False)
                    if event.kind == "stream.error":
                        assert event.error is not None
                        assert event.error.code == Status.FAILED_PRECONDITION.value
                        assert time.monotonic() - started < 5
                        await stream.cancel()
                    if event.kind == "run.cancelled":
                        return
            raise AssertionError("the run was not cancelled while its tool ran")
        finally:
            channel.close()

    run(scenario())
