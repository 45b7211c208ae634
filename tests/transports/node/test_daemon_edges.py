"""``reel node`` as a real subprocess, fed malformed requests on both transports: every one is
refused with a 4xx / INVALID_ARGUMENT and one log line on stderr, never a traceback, never the
token, and the node keeps serving."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.client import Channel
from grpclib.const import Status

from tests.transports.grpc.rawcall import RawCodec, call, frame, methods
from tests.transports.node.test_daemon import Daemon
from transports.build import version

PORTS = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}


@pytest.fixture
def daemon(data_dir: Path) -> Iterator[Daemon]:
    running = Daemon(data_dir, PORTS)
    try:
        yield running
    finally:
        running.kill()


def raw_http(host: str, port: int, request: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
        return received


def test_malformed_requests_cost_one_log_line_each(daemon: Daemon, data_dir: Path) -> None:
    ready = daemon.wait_for("reel node ready")
    token = (data_dir / "admin.token").read_text().strip()
    console = ready["console"].removeprefix("http://").rstrip("/")
    host, _, port = console.rpartition(":")
    grpc_host, _, grpc_port = ready["grpc"].rpartition(":")
    before = len(daemon.lines)

    # HTTP: a header line aiohttp cannot parse, carrying the token
    refused = raw_http(
        host,
        int(port),
        b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + token.encode() + b"\x00\r\n\r\n",
    )
    assert refused.startswith(b"HTTP/1.1 400") or refused.startswith(b"HTTP/1.0 400")
    assert token.encode() not in refused
    # HTTP: invalid UTF-8 inside a JSON string
    request = urllib.request.Request(
        f"http://{console}/v1/sessions",
        data=b'{"label": "\xff"}',
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(request, timeout=10)
    assert bad.value.code == 400
    assert json.loads(bad.value.read())["error"]["field"] == "$.label"

    # gRPC: a malformed message to every method, and a compressed frame
    async def grpc_calls() -> list[Status]:
        channel = Channel(grpc_host, int(grpc_port), codec=RawCodec())
        metadata = {"authorization": f"Bearer {token}"}
        try:
            statuses = [
                await call(channel, method, metadata, message=b"\x0a\xff\xff\xff\xff\x0f")
                for method in methods()
            ]
            statuses.append(
                await call(channel, methods()[0], metadata, raw_frame=frame(b"", compressed=True))
            )
            return statuses
        finally:
            channel.close()

    statuses = asyncio.run(grpc_calls())
    assert set(statuses) == {Status.INVALID_ARGUMENT}
    expected = 1 + len(statuses)  # the HTTP parse error, then one per gRPC call
    deadline = time.monotonic() + 5
    while len(daemon.lines) - before < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # and nothing more arrives
    new = daemon.lines[before:]
    assert len(new) == expected, new
    assert all("refused a" in line for line in new), new
    assert not any("Traceback" in line or token in line for line in new)
    health = urllib.request.urlopen(f"http://{console}/healthz", timeout=10)
    assert json.loads(health.read()) == {"status": "ok", "version": version()}
