"""``reel.v1.Gateway/RouteMessage`` over real gRPC: the same decision as the HTTP route, Cedar's
``channel.route`` for the caller, bad input INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from events.catalog import AccessDecided
from proto.reel.v1 import (
    ApprovalChange,
    ApprovalChangeKind,
    ApprovalsStub,
    ApprovalState,
    ChannelAttachment,
    GatewayStub,
    RouteMessageRequest,
    RouteMessageResponse,
    WatchApprovalsRequest,
)
from tests.transports.channels.kit import channel, hub_of
from transports.access.tokens import create_token
from transports.config import GrpcConfig, NodeConfig
from transports.grpc import GrpcServer, start_grpc
from transports.grpc.client import auth_metadata
from transports.runtime import Runtime, open_runtime


@pytest.fixture
def served(data_dir: Path) -> Iterator[tuple[Runtime, GrpcServer, str]]:
    config = NodeConfig(
        grpc=GrpcConfig(port=0),
        channels={"hook": channel(dm_policy="allow", max_message_bytes=100)},
    )
    runtime = open_runtime(data_dir, config=config)
    server = start_grpc(runtime, port=0)
    try:
        yield runtime, server, (data_dir / "admin.token").read_text().strip()
    finally:
        server.close()
        runtime.close(0)


def route(server: GrpcServer, token: str, **fields: Any) -> RouteMessageResponse:
    async def call() -> RouteMessageResponse:
        grpc_channel = Channel("127.0.0.1", server.port)
        try:
            stub = GatewayStub(grpc_channel, metadata=auth_metadata(token), timeout=20)
            request: dict[str, Any] = {
                "channel": "hook",
                "conversation": "dm-alice",
                "sender": "@alice:localhost",
                "text": "hello",
                "message_id": "g1",
                "is_direct": True,
            }
            request.update(fields)
            return await stub.route_message(RouteMessageRequest(**request))
        finally:
            grpc_channel.close()

    return asyncio.run(call())


def error(server: GrpcServer, token: str, **fields: Any) -> GRPCError:
    with pytest.raises(GRPCError) as raised:
        route(server, token, **fields)
    return raised.value


def test_route_message_accepts_and_starts_a_run(served: tuple[Runtime, GrpcServer, str]) -> None:
    runtime, server, token = served
    accepted = route(server, token, attachments=[ChannelAttachment(name="a.txt")])
    assert accepted.accepted and accepted.reason == "accepted" and accepted.route == "run"
    assert accepted.run_id and accepted.session_id and accepted.session_key == "hook:dm-alice"
    assert accepted.principal == "channel:hook:@alice:localhost"
    again = route(server, token)
    assert again.duplicate and not again.accepted and not again.run_id
    refused = route(server, token, message_id="g2", is_direct=False)
    assert not refused.accepted and refused.reason == "mention_required"
    decided = [e.decode() for e in runtime.journal.read(0, 10_000) if e.kind == "access.decided"]
    assert [d.action for d in decided if isinstance(d, AccessDecided)].count("channel.route") == 3


def test_route_message_bad_input_and_permissions(
    served: tuple[Runtime, GrpcServer, str],
) -> None:
    runtime, server, token = served
    assert error(server, token, channel="nope").status == Status.NOT_FOUND
    bad = error(server, token, sender="bob smith", message_id="b1")
    assert bad.status == Status.INVALID_ARGUMENT and (bad.message or "").startswith("sender:")
    long = error(server, token, text="x" * 101, message_id="b2")
    assert long.status == Status.INVALID_ARGUMENT and (long.message or "").startswith("text:")
    empty = error(server, token, message_id="")
    assert empty.status == Status.INVALID_ARGUMENT and "message_id" in (empty.message or "")
    viewer, _ = create_token(
        runtime.journal,
        runtime.authority.tokens,
        principal="user:vera",
        roles=["viewer"],
        created_by="admin",
    )
    denied = error(server, viewer, message_id="v1")
    assert denied.status == Status.PERMISSION_DENIED
    assert "channel.route" in (denied.message or "")


def test_a_pairing_request_reaches_approvals_watch(data_dir: Path) -> None:
    """A device pairing is an approval like a tool call's: Approvals.Watch reports it."""
    config = NodeConfig(grpc=GrpcConfig(port=0), channels={"hook": channel(dm_policy="pairing")})
    runtime = open_runtime(data_dir, config=config)
    server = start_grpc(runtime, port=0)
    token = (data_dir / "admin.token").read_text().strip()
    try:
        code = hub_of(runtime).mint_code("hook", ttl_ms=600_000, principal="admin").result(10).code

        async def watch() -> list[ApprovalChange]:
            grpc_channel = Channel("127.0.0.1", server.port)
            try:
                stub = ApprovalsStub(grpc_channel, metadata=auth_metadata(token), timeout=20)
                seen: list[ApprovalChange] = []

                async def follow() -> None:
                    async for change in stub.watch(WatchApprovalsRequest()):
                        seen.append(change)
                        return

                watcher = asyncio.create_task(follow())
                await asyncio.sleep(0.2)
                paired = await asyncio.to_thread(
                    route, server, token, text=f"pair {code}", message_id="g-pair"
                )
                assert paired.accepted, paired
                await asyncio.wait_for(watcher, 20)
                return seen
            finally:
                grpc_channel.close()

        (change,) = asyncio.run(asyncio.wait_for(watch(), 30))
        assert change.change == ApprovalChangeKind.REQUESTED
        assert change.approval is not None
        assert change.approval.principal == "channel:hook:@alice:localhost"
        assert change.approval.state == ApprovalState.PENDING
    finally:
        server.close()
        runtime.close(0)
