"""A node without ``[channels]`` has no hub (``Runtime.channels`` is None: the hub's module is
never imported, tests/transports/node/test_daemon_imports.py) and answers every channel route as
a node with an empty hub did: no channels listed, any name unknown (HTTP 404, gRPC NOT_FOUND),
the channel counters at zero."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import GatewayStub, RouteMessageRequest
from tests.transports.channels.kit import message, post_webhook, signature
from tests.transports.http.httpkit import close_node, open_node
from transports.config import GrpcConfig
from transports.grpc import start_grpc
from transports.grpc.client import auth_metadata

UNKNOWN = "no channel named 'hook' is configured"


def test_a_node_without_channels_answers_every_channel_route(data_dir: Path) -> None:
    node = open_node(data_dir, grpc=GrpcConfig(port=0))
    grpc = start_grpc(node.runtime, port=0)
    try:
        assert node.runtime.channels is None
        listed = node.call("GET", "/v1/channels")
        assert listed.status == 200 and listed.json() == {"items": []}
        for path, body in (
            ("/v1/channels/hook/messages", message("hello")),
            ("/v1/channels/hook/pair-codes", {}),
        ):
            reply = node.call("POST", path, body)
            assert reply.status == 404 and reply.error["message"] == UNKNOWN, path
        raw = json.dumps(message("hello")).encode()
        hooked = post_webhook(node, "hook", raw, signature(raw))  # no bearer token: public
        assert hooked.status == 404 and hooked.error["message"] == UNKNOWN

        async def route() -> None:
            channel = Channel("127.0.0.1", grpc.port)
            try:
                stub = GatewayStub(channel, metadata=auth_metadata(node.token), timeout=20)
                request = RouteMessageRequest(
                    channel="hook", conversation="c", sender="s", text="t", message_id="m1"
                )
                await stub.route_message(request)
            finally:
                channel.close()

        with pytest.raises(GRPCError) as raised:
            asyncio.run(route())
        assert raised.value.status == Status.NOT_FOUND
        assert "hook" in (raised.value.message or "")
        metrics = node.call("GET", "/metrics").body.decode()
        assert "\nreel_channel_webhook_bad_signatures_total 0\n" in metrics
        assert "\nreel_channel_duplicates_total 0\n" in metrics
    finally:
        grpc.close()
        close_node(node)
