"""`EgressProxy`: the node's HTTP proxy for MCP servers' egress.

Two users: an ``http_egress`` stdio server, through a Unix socket in its own directory, and the
node's own client of a Streamable HTTP server (``url``), through a loopback port.

An ``http_egress`` server runs with no network (tools/mcp/relay.py carries its proxied
connections to this socket), so every connection it makes is one this proxy decided, by the
same `EgressPolicy` as ``http.fetch``: the host on ``[tools] http_allowlist``, and every address
it resolves to public or allowed by ``http_allow_private``. The proxy then connects to the
address it checked (never resolving the name again: no rebinding between the check and the
connection).

Two request forms, one request per connection:
- ``CONNECT host:port`` (HTTPS): answered ``200`` and spliced; TLS stays end to end.
- an absolute-form request (``GET http://host:port/path HTTP/1.1``, plain HTTP): its request
  line is rewritten to origin form, ``Proxy-*`` headers dropped and ``Connection: close``
  set on the request and on the response's head, then spliced.

A refusal is ``403`` with the reason as the body (the server's tool error then names it); a
connection that cannot be made is ``502``. Nothing is logged with a request's contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import urllib.parse
from pathlib import Path

from tools.egress import EgressPolicy, IPAddress
from tools.result import ToolFault
from tools.sandbox import GUEST_WORKSPACE, Sandbox

__all__ = ["SOCKET_NAME", "EgressProxy", "guest_socket", "relayed"]

SOCKET_NAME = ".reel-egress.sock"
"""The socket's name in the server's own directory (the sandbox's ``/workspace``)."""
HEAD_LIMIT = 64 * 1024
"""The most a request line and its headers may take."""
CONNECT_TIMEOUT_S = 10.0
CHUNK = 64 * 1024


class EgressProxy:
    """One server's proxy: listening on ``SOCKET_NAME`` in the directory ``dir_fd`` while
    open (`start`, `close`), on the running asyncio loop."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, dir_fd: int) -> None:
        """Listen in the directory ``dir_fd`` (bound through /proc/self/fd: a Unix socket's
        path is limited to 107 bytes, a data dir's is not)."""
        path = f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(SOCKET_NAME, dir_fd=dir_fd)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(path)
            # The directory is the server's alone (0700, its owner the sandbox's user); the
            # socket is made by this process, and a socket's owner is never adopted.
            os.chmod(SOCKET_NAME, 0o666, dir_fd=dir_fd)
        except BaseException:
            sock.close()
            raise
        self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=HEAD_LIMIT)

    async def listen_loopback(self) -> int:
        """Listen on a free loopback port instead (for the node's own client of a Streamable
        HTTP server); the port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=HEAD_LIMIT)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._one(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, _, rest = head.partition(b"\r\n")
        try:
            method, host, port, forwarded = _request(line, rest)
            address = await self._vet(host, port)
        except ToolFault as fault:
            status = "400 Bad Request" if fault.kind == "invalid" else "403 Forbidden"
            _answer(writer, status, f"reel egress: {fault.message}")
            return
        try:
            upstream_r, upstream_w = await asyncio.wait_for(
                asyncio.open_connection(str(address), port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            _answer(writer, "502 Bad Gateway", f"reel egress: {host}:{port} could not be reached")
            return
        try:
            if method == b"CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await asyncio.gather(_splice(reader, upstream_w), _splice(upstream_r, writer))
                return
            upstream_w.write(forwarded)
            request = asyncio.ensure_future(_splice(reader, upstream_w))
            try:
                answer, *headers = (await upstream_r.readuntil(b"\r\n\r\n")).split(b"\r\n")
                writer.write(_closing(answer, headers))  # the client must not send a second request
                await _splice(upstream_r, writer)
            finally:
                request.cancel()
        finally:
            upstream_w.close()

    async def _vet(self, host: str, port: int) -> IPAddress:
        loop = asyncio.get_running_loop()
        addresses = await loop.run_in_executor(None, self._policy.vetted, host, port)
        return addresses[0]


def _request(line: bytes, headers: bytes) -> tuple[bytes, str, int, bytes]:
    """``(method, host, port, what to send upstream)``; ToolFault ``invalid`` for
    anything but a CONNECT or an absolute-form http request."""
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise ToolFault("invalid", "not an HTTP/1 proxy request")
    method, target, version = parts
    text = target.decode("ascii", "replace")
    if method == b"CONNECT":
        host, sep, port = text.rpartition(":")
        if not sep or not port.isdigit():
            raise ToolFault("invalid", f"CONNECT {text!r}: not host:port")
        return method, host.strip("[]"), int(port), b""
    url = urllib.parse.urlsplit(text)
    if url.scheme != "http" or not url.hostname:
        raise ToolFault("invalid", f"{text!r}: a proxy request names an http:// URL")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    start = b" ".join([method, path.encode("ascii", "replace"), version])
    forwarded = _closing(start, headers.split(b"\r\n"), drop=(b"proxy-", *HOP_BY_HOP))
    return method, url.hostname, url.port or 80, forwarded


HOP_BY_HOP = (b"connection:", b"keep-alive:")
"""Header prefixes (lower case) of a connection's own headers, replaced by ``Connection: close``."""


def _closing(start: bytes, headers: list[bytes], *, drop: tuple[bytes, ...] = HOP_BY_HOP) -> bytes:
    """A message head: its ``start`` line, its ``headers`` but those starting with ``drop``,
    and ``Connection: close`` (one request, one answer per connection, either way)."""
    kept = [h for h in headers if h and not h.lower().startswith(drop)]
    return b"\r\n".join([start, *kept, b"Connection: close"]) + b"\r\n\r\n"


def _answer(writer: asyncio.StreamWriter, status: str, reason: str) -> None:
    body = reason.encode()
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )


async def _splice(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end of file, then end ``sink``'s writing half."""
    with contextlib.suppress(OSError):
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()


def guest_socket() -> str:
    """The socket's path as the sandbox sees it (the server's own directory is its
    ``/workspace``)."""
    return f"{GUEST_WORKSPACE}/{SOCKET_NAME}"


def relayed(sandbox: Sandbox, search_path: str) -> list[str]:
    """The start of a command that runs the relay (tools/mcp/relay.py) on the sandbox's
    Python; the socket's path and the server's command follow. ToolFault ``invalid`` when no
    ``python3`` is visible inside."""
    python = shutil.which("python3", path=search_path)
    if python is None or not sandbox.visible(python):
        raise ToolFault(
            "invalid", "http_egress: no python3 on shell_path inside the sandbox to run the relay"
        )
    return [python, "-I", "-S", "-c", _RELAY_SOURCE]


_RELAY_SOURCE = (Path(__file__).parent / "relay.py").read_text(encoding="utf-8")
