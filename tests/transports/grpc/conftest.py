"""A real node with its gRPC server on a loopback port, shared by a test module.

Every test talks to it over TCP with a real client (grpclib here, grpcio in the interop tests).
Tests that stop the server start their own node (:func:`start_node`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from grpclib.client import Channel

from proto.reel.v1 import TapeEvent
from transports.config import GrpcConfig, NodeConfig, ProviderConfig, ToolsSection
from transports.grpc import GrpcServer, start_grpc
from transports.grpc.client import RunStreamClient, auth_metadata
from transports.runtime import Runtime, open_runtime

T = TypeVar("T")
MAX_MESSAGE = 64 * 1024
SHELL_ECHO = '/tool shell.run {"argv":["echo","yo"]}'
"""A run whose one tool call needs a human approval (shell is ask-each-time)."""
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}


def node_config(chunk_delay_s: float = 0.0, shell: tuple[str, ...] = ("echo",)) -> NodeConfig:
    return NodeConfig(
        grpc=GrpcConfig(port=0, max_message_bytes=MAX_MESSAGE),
        provider=ProviderConfig(chunk_delay_s=chunk_delay_s),
        tools=ToolsSection(shell_allowlist=shell),
    )


@dataclass
class GrpcNode:
    data_dir: Path
    runtime: Runtime
    server: GrpcServer
    token: str

    @property
    def address(self) -> str:
        return self.server.address

    def channel(self) -> Channel:
        return Channel("127.0.0.1", self.server.port)

    @property
    def metadata(self) -> dict[str, str]:
        return auth_metadata(self.token)

    def stream(self, channel: Channel) -> RunStreamClient:
        return RunStreamClient(channel, self.token, timeout=30)

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            self.runtime.close(grace_s=0)


def start_node(
    data_dir: Path, *, port: int = 0, chunk_delay_s: float = 0.0, shell: tuple[str, ...] = ("echo",)
) -> GrpcNode:
    runtime = open_runtime(data_dir, config=node_config(chunk_delay_s, shell))
    try:
        server = start_grpc(runtime, port=port)
    except BaseException:
        runtime.close(grace_s=0)
        raise
    token = (data_dir / "admin.token").read_text().strip()
    return GrpcNode(data_dir, runtime, server, token)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcNode]:
    started = start_node(tmp_path_factory.mktemp("grpc-node"), chunk_delay_s=0.001)
    try:
        yield started
    finally:
        started.close()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a client coroutine on a fresh event loop (the server has its own loop thread)."""
    return asyncio.run(asyncio.wait_for(coro, 30))


async def converse(
    node: GrpcNode, text: str, *, allow: bool | None = True, **start: Any
) -> list[TapeEvent]:
    """Start a run and follow it to the end, answering approvals on the stream."""
    channel = node.channel()
    try:
        async with node.stream(channel) as stream:
            await stream.start(text, **start)
            events = []
            async for event in stream.events():
                events.append(event)
                if event.approval_request is not None and allow is not None:
                    await stream.approve(event.approval_request.approval_id, allow=allow)
            return events
    finally:
        channel.close()


def tape_seqs(events: list[TapeEvent]) -> list[int]:
    return [e.tape_seq for e in events if e.tape_seq >= 0]
