"""A real node with the HTTP API on a free loopback port, and a small HTTP/SSE client.

The client is the standard library's ``http.client`` over a real socket: no test double of
reel's code anywhere.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transports.config import HttpConfig, NodeConfig, ToolsSection
from transports.http import HttpServer, start_http
from transports.runtime import Runtime, open_runtime

MAX_BODY = 4096
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
SHELL = '/tool shell.run {"argv":["echo","yo"]}'


@dataclass
class HttpReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, Any]:
        error: dict[str, Any] = self.json()["error"]
        return error


@dataclass
class SseEvent:
    id: str | None = None
    event: str | None = None
    data: str = ""
    comments: list[str] = field(default_factory=list)

    @property
    def entry(self) -> dict[str, Any]:
        entry: dict[str, Any] = json.loads(self.data)
        return entry


class SseStream:
    """An open ``/v1/runs/{id}/events`` response, read event by event."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse):
        self.conn = conn
        self.response = response
        self.comments: list[str] = []

    def next(self) -> SseEvent | None:
        """The next event (comments are collected on the way), or None at the end."""
        current = SseEvent()
        seen = False
        while True:
            raw = self.response.readline()
            if not raw:
                return current if seen else None
            line = raw.decode().rstrip("\r\n")
            if line == "":
                if seen:
                    return current
                continue
            if line.startswith(":"):
                self.comments.append(line[1:].strip())
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            seen = True
            if name == "id":
                current.id = value
            elif name == "event":
                current.event = value
            elif name == "data":
                current.data = value if not current.data else f"{current.data}\n{value}"

    def rest(self) -> list[SseEvent]:
        out = []
        while (event := self.next()) is not None:
            out.append(event)
        return out

    def close(self) -> None:
        self.conn.close()


@dataclass
class HttpNode:
    runtime: Runtime
    server: HttpServer
    token: str

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.server.host, self.server.port, timeout=timeout)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: str | None = "default",
    ) -> HttpReply:
        sent = dict(headers or {})
        if auth == "default":
            sent["Authorization"] = f"Bearer {self.token}"
        elif auth is not None:
            sent["Authorization"] = auth
        payload = raw if raw is not None else None if body is None else json.dumps(body).encode()
        if payload is not None:
            sent.setdefault("Content-Type", "application/json")
        conn = self.connection()
        try:
            conn.request(method, path, body=payload, headers=sent)
            response = conn.getresponse()
            data = response.read()
            return HttpReply(
                response.status, {k.lower(): v for k, v in response.getheaders()}, data
            )
        finally:
            conn.close()

    def raw(self, request: bytes, timeout: float = 10.0) -> bytes:
        """Send ``request`` as is over a fresh socket; everything the server sends back until it
        closes (or ``timeout``)."""
        with socket.create_connection((self.server.host, self.server.port), timeout) as sock:
            sock.sendall(request)
            received = b""
            with contextlib.suppress(TimeoutError):
                while chunk := sock.recv(65536):
                    received += chunk
            return received

    def stream(
        self, run_id: str, headers: dict[str, str] | None = None, query: str = ""
    ) -> SseStream:
        conn = self.connection()
        conn.request(
            "GET",
            f"/v1/runs/{run_id}/events{query}",
            headers={"Authorization": f"Bearer {self.token}", **(headers or {})},
        )
        response = conn.getresponse()
        assert response.status == 200, response.read()
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        return SseStream(conn, response)

    # --- scenario helpers -------------------------------------------------------------------

    def session(self, **body: Any) -> str:
        reply = self.call("POST", "/v1/sessions", body)
        assert reply.status in (200, 201), reply
        session_id: str = reply.json()["session_id"]
        return session_id

    def start(self, text: str, session_id: str | None = None) -> str:
        sid = session_id or self.session()
        reply = self.call("POST", f"/v1/sessions/{sid}/messages", {"text": text})
        assert reply.status == 202, reply
        run_id: str = reply.json()["run_id"]
        return run_id

    def finish(self, run_id: str) -> list[SseEvent]:
        """Follow the run's events to its end (the stream ends at the terminal entry)."""
        stream = self.stream(run_id)
        try:
            return stream.rest()
        finally:
            stream.close()

    def until(self, run_id: str, kind: str) -> tuple[SseStream, SseEvent]:
        """Open the run's stream and read up to the first entry of ``kind``."""
        stream = self.stream(run_id)
        while (event := stream.next()) is not None:
            if event.event == kind:
                return stream, event
        stream.close()
        raise AssertionError(f"the stream ended without {kind}")

    def pending_approval(self, run_id: str) -> str:
        stream, event = self.until(run_id, "tool.approval_requested")
        stream.close()
        approval_id: str = event.entry["event"]["approval_id"]
        return approval_id


def eventually(check: Any, timeout: float = 10.0) -> Any:
    """Poll ``check()`` until it returns a truthy value (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


def open_node(
    data_dir: Path,
    keepalive_s: float = 15.0,
    shell: tuple[str, ...] = ("echo",),
    fetch: tuple[str, ...] = (),
    **config: Any,
) -> HttpNode:
    """A node (shell allowlist ``shell``, http.fetch allowlist ``fetch``) serving HTTP."""
    cfg = NodeConfig(
        http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
        tools=ToolsSection(shell_allowlist=shell, http_allowlist=fetch),
        **config,
    )
    runtime = open_runtime(data_dir, config=cfg)
    try:
        server = start_http(runtime, keepalive_s=keepalive_s)
    except BaseException:
        runtime.close(1.0)
        raise
    token = (data_dir / "admin.token").read_text().strip()
    return HttpNode(runtime=runtime, server=server, token=token)


def close_node(node: HttpNode) -> None:
    try:
        node.server.close()
    finally:
        node.runtime.close(1.0)
