"""The node's egress proxy for ``http_egress`` MCP servers, spoken to directly on its socket:
it lets through what the allowlist holds (both request forms), refuses the rest before any
connection, and forwards nothing of a proxy's own headers."""

from __future__ import annotations

import asyncio
import ipaddress
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from tools.egress import EgressPolicy, IPAddress
from tools.mcp.egress_proxy import SOCKET_NAME, EgressProxy

Exchange = Callable[[bytes], Awaitable[bytes]]


class Origin:
    """A loopback TCP server that records what it was sent and answers a fixed response."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.port = 0

    async def __aenter__(self) -> Origin:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.received.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\norigin")
        await writer.drain()
        writer.close()


async def proxied(tmp_path: Path, allow: tuple[str, ...]) -> AsyncIterator[Exchange]:
    proxy = EgressProxy(EgressPolicy(allow, allow))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    await proxy.start(fd)

    async def exchange(request: bytes) -> bytes:
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / SOCKET_NAME))
        writer.write(request)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        return answer

    try:
        yield exchange
    finally:
        await proxy.close()
        os.close(fd)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_a_listed_host_is_reached_in_origin_form_without_proxy_headers(tmp_path: Path) -> None:
    async def test() -> None:
        async with Origin() as origin:
            async for exchange in proxied(tmp_path, ("127.0.0.1",)):
                answer = await exchange(
                    f"GET http://127.0.0.1:{origin.port}/a?b=1 HTTP/1.1\r\n"
                    f"Host: 127.0.0.1:{origin.port}\r\nProxy-Authorization: Basic c2VjcmV0\r\n"
                    "Connection: keep-alive\r\n\r\n".encode()
                )
        assert answer.endswith(b"origin")
        [sent] = origin.received
        assert sent.startswith(b"GET /a?b=1 HTTP/1.1\r\n")
        assert b"Proxy-Authorization" not in sent and b"keep-alive" not in sent
        assert b"Connection: close" in sent

    run(test)


def test_connect_to_a_listed_host_is_spliced(tmp_path: Path) -> None:
    async def test() -> None:
        async with Origin() as origin:
            async for exchange in proxied(tmp_path, ("127.0.0.1",)):
                answer = await exchange(
                    f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1\r\n\r\n"
                    "GET / HTTP/1.1\r\nHost: x\r\n\r\n".encode()
                )
        assert answer.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK")
        assert origin.received == [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"]

    run(test)


@pytest.mark.parametrize(
    ("request_line", "status", "reason"),
    [
        ("GET http://localhost:{port}/ HTTP/1.1", b"403", b"not in the http allowlist"),
        ("CONNECT localhost:{port} HTTP/1.1", b"403", b"not in the http allowlist"),
        ("CONNECT 0.0.0.0:{port} HTTP/1.1", b"403", b"not in the http allowlist"),
        ("GET https://127.0.0.1:{port}/ HTTP/1.1", b"400", b"names an http:// URL"),
        ("GET /relative HTTP/1.1", b"400", b"names an http:// URL"),
        ("CONNECT 127.0.0.1 HTTP/1.1", b"400", b"not host:port"),
        ("GARBAGE", b"400", b"not an HTTP/1 proxy request"),
    ],
)
def test_what_is_not_allowed_is_refused_before_any_connection(
    tmp_path: Path, request_line: str, status: bytes, reason: bytes
) -> None:
    async def test() -> None:
        async with Origin() as origin:
            async for exchange in proxied(tmp_path, ("127.0.0.1",)):
                line = request_line.format(port=origin.port)
                answer = await exchange(f"{line}\r\nHost: x\r\n\r\n".encode())
        assert answer.startswith(b"HTTP/1.1 " + status), answer
        assert reason in answer
        assert origin.received == []

    run(test)


def test_a_listed_name_resolving_to_a_private_address_is_refused(tmp_path: Path) -> None:
    """``localhost`` on the allowlist, but loopback not allowed: the address decides."""

    async def test() -> None:
        proxy = EgressProxy(EgressPolicy(("localhost",), ()))
        fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
        await proxy.start(fd)
        try:
            async with Origin() as origin:
                reader, writer = await asyncio.open_unix_connection(str(tmp_path / SOCKET_NAME))
                writer.write(f"CONNECT localhost:{origin.port} HTTP/1.1\r\n\r\n".encode())
                answer = await asyncio.wait_for(reader.read(), 10)
                writer.close()
            assert answer.startswith(b"HTTP/1.1 403") and b"loopback" in answer
            assert origin.received == []
        finally:
            await proxy.close()
            os.close(fd)

    run(test)


def test_an_endless_head_is_cut_off(tmp_path: Path) -> None:
    async def test() -> None:
        async for exchange in proxied(tmp_path, ("127.0.0.1",)):
            answer = await exchange(b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * 200_000)
            assert answer == b""

    run(test)


class Rebinding(EgressPolicy):
    """A name whose check answers 127.0.0.1 and which no resolver knows afterwards (a DNS
    server that rebinds between the check and the connection, at its limit)."""

    def vetted(self, host: str, port: int) -> list[IPAddress]:
        self.check_host(host)
        return [ipaddress.ip_address("127.0.0.1")] if host == "pinned.invalid" else []


def test_the_proxy_connects_to_the_address_it_checked_not_the_name(tmp_path: Path) -> None:
    async def test() -> None:
        proxy = EgressProxy(Rebinding(("pinned.invalid",), ()))
        async with Origin() as origin:
            port = await proxy.listen_loopback()
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(
                    f"GET http://pinned.invalid:{origin.port}/p HTTP/1.1\r\n"
                    f"Host: pinned.invalid:{origin.port}\r\n\r\n".encode()
                )
                answer = await asyncio.wait_for(reader.read(), 10)
                writer.close()
            finally:
                await proxy.close()
        assert answer.startswith(b"HTTP/1.1 200 OK") and b"Connection: close" in answer
        assert [r.split(b"\r\n")[0] for r in origin.received] == [b"GET /p HTTP/1.1"]

    run(test)
