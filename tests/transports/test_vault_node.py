"""The vault through a real node (docs/vault.md): a secret named by handle reaches a loopback
server and nothing else; what a tool echoes back is redacted in every form; ``vault.use`` and a
missing secret refuse the call before it runs; a rotation takes effect at the next call.

Each test runs a node with its HTTP API on loopback, a real SQLite journal, real Cedar and a
real loopback server that records what it received and echoes the secret back (as is, base64,
URL-encoded, and split across chunks of a chunked response)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiohttp import web

from events import JournalReader
from events.redaction.terms import forms
from events.sqlite.export import export_records
from tests.tools.conftest import LoopbackServer
from tests.tools.sandboxkit import require_sandbox
from tests.transports.http.httpkit import HttpNode, close_node
from tests.transports.test_learning_node import RecordingProvider
from tests.transports.test_tool_result_redaction import approve_until_done
from transports.config import HttpConfig, NodeConfig, ToolsSection
from transports.http import start_http
from transports.models import DeterministicProvider
from transports.runtime import open_runtime

SECRET = "correct-horse-battery-staple-42"
"""No detector shape: only the vault's exact-match terms can find it."""
ROTATED = "second-horse-battery-staple-43"


class EchoServer(LoopbackServer):
    """Records every request's headers; ``/echo`` answers with the ``X-Key`` header's value as
    is, base64 (``user:`` before it, as Basic auth would), URL-encoded, and split across two
    chunks of a chunked response; ``/both`` answers with both values of the test."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[dict[str, str]] = []

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/echo", self._echo_key)
        app.router.add_get("/both", self._both)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        assert isinstance(site._server, asyncio.Server)
        self.port = site._server.sockets[0].getsockname()[1]

    async def _echo_key(self, request: web.Request) -> web.StreamResponse:
        self.received.append(dict(request.headers))
        key = request.headers.get("X-Key", "")
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        basic = base64.b64encode(f"user:{key}".encode()).decode()
        await response.write(f"raw={key}\nbasic={basic}\nurl={urllib.parse.quote(key)}\n".encode())
        await response.write(f"split={key[:7]}".encode())
        await asyncio.sleep(0.05)
        await response.write(f"{key[7:]}\n".encode())
        await response.write_eof()
        return response

    async def _both(self, request: web.Request) -> web.Response:
        self.received.append(dict(request.headers))
        return web.Response(text=f"old={SECRET} new={ROTATED}")


class Captured(logging.Handler):
    """Every log record of the node, as formatted and with its extra fields."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.getMessage()} {record.__dict__!r}")


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def logs() -> Iterator[Captured]:
    handler, root = Captured(), logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def open_vault_node(data_dir: Path, provider: DeterministicProvider, **tools: Any) -> HttpNode:
    config = NodeConfig(
        http=HttpConfig(port=0, max_body_bytes=64 * 1024),
        tools=ToolsSection(
            http_allowlist=("127.0.0.1",), http_allow_private=("127.0.0.1/32",), **tools
        ),
    )
    runtime = open_runtime(data_dir, config=config, provider=provider)
    server = start_http(runtime, keepalive_s=15)
    token = (data_dir / "admin.token").read_text().strip()
    return HttpNode(runtime=runtime, server=server, token=token)


def fetch(url: str, headers: dict[str, Any]) -> str:
    return "/tool http.fetch " + json.dumps({"url": url, "headers": headers})


def tape(node: HttpNode, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()[
        "items"
    ]
    return items


def completed(node: HttpNode, run_id: str) -> dict[str, Any]:
    (done,) = [e["event"] for e in tape(node, run_id) if e["kind"] == "tool.completed"]
    assert isinstance(done, dict)
    return done


def run_to_end(node: HttpNode, text: str, token: str | None = None) -> str:
    if token is None:
        run_id = node.start(text)
    else:
        session = node.call("POST", "/v1/sessions", {}, auth=token).json()["session_id"]
        reply = node.call("POST", f"/v1/sessions/{session}/messages", {"text": text}, auth=token)
        assert reply.status == 202, reply
        run_id = reply.json()["run_id"]
    approve_until_done(node, run_id)
    return run_id


def needles(*values: str) -> set[bytes]:
    return {form.encode() for value in values for form in forms(value)}


def assert_nowhere(where: str, data: bytes | str, values: tuple[str, ...]) -> None:
    raw = data.encode() if isinstance(data, str) else data
    for needle in needles(*values):
        assert needle not in raw, f"{needle!r} (a form of a vault value) reached {where}"


def test_a_secret_reaches_the_server_and_nothing_else(
    data_dir: Path, echo: EchoServer, logs: Captured
) -> None:
    provider = RecordingProvider()
    node = open_vault_node(data_dir, provider)
    seen: list[str] = []
    try:
        reply = node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET})
        assert reply.status == 201, reply
        seen.append(reply.body.decode())
        headers = {"Authorization": "Bearer ${vault:gh}", "X-Key": {"vault": "gh"}}
        run_id = run_to_end(node, fetch(f"{echo.base}/echo", headers))
        done = completed(node, run_id)
        assert done["ok"], done
        (received,) = echo.received
        assert received["Authorization"] == f"Bearer {SECRET}"
        assert received["X-Key"] == SECRET
        body = json.loads(done["output"])["body"]
        for line in ("raw=", "basic=dXNlcjp", "url=", "split="):
            assert f"{line}[REDACTED]" in body, (line, body)
        (decided,) = [e["event"] for e in tape(node, run_id) if e["kind"] == "tool.decided"]
        assert decided["vault"] == ["gh"]
        assert "baseline.vault.use" in decided["policy_ids"]
        seen.append(json.dumps([e.data for e in node.finish(run_id)]))
        seen.append(node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").body.decode())
        seen.append(node.call("GET", "/v1/vault").body.decode())
    finally:
        close_node(node)
    for i, text in enumerate(seen):
        assert_nowhere(f"API answer {i}", text, (SECRET,))
    assert provider.requests
    for i, messages in enumerate(provider.requests):
        assert_nowhere(f"model input {i}", msgspec.json.encode(messages), (SECRET,))
    assert_nowhere("the node's logs", "\n".join(logs.lines), (SECRET,))
    files = [p for p in data_dir.rglob("*") if p.is_file()]
    assert any(p.parent.name == "vault" for p in files), files
    for path in files:
        assert_nowhere(str(path), path.read_bytes(), (SECRET,))
    reader = JournalReader(data_dir / "journal.db")
    try:
        assert_nowhere(
            "the export", json.dumps(list(export_records(reader)), default=str), (SECRET,)
        )
    finally:
        reader.close()


def test_rotation_is_used_at_the_next_call_and_both_values_are_redacted(
    data_dir: Path, echo: EchoServer
) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        assert node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}).status == 201
        rotated = node.call("POST", "/v1/vault/gh/rotate", {"value": ROTATED})
        assert rotated.status == 200 and rotated.json()["revision"] == 2, rotated
        run_id = run_to_end(node, fetch(f"{echo.base}/both", {"X-Key": {"vault": "gh"}}))
        done = completed(node, run_id)
        assert echo.received[-1]["X-Key"] == ROTATED
        assert json.loads(done["output"])["body"] == "old=[REDACTED] new=[REDACTED]"
    finally:
        close_node(node)
    for path in (p for p in data_dir.rglob("*") if p.is_file()):
        assert_nowhere(str(path), path.read_bytes(), (SECRET, ROTATED))


def test_a_principal_without_vault_use_is_refused_before_the_call_runs(
    data_dir: Path, echo: EchoServer
) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        assert node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}).status == 201
        made = node.call("POST", "/v1/tokens", {"principal": "agent:bot", "roles": ["agent"]})
        bot = f"Bearer {made.json()['token']}"
        run_id = run_to_end(node, fetch(f"{echo.base}/echo", {"X-Key": {"vault": "gh"}}), bot)
        events = tape(node, run_id)
        (decided,) = [e["event"] for e in events if e["kind"] == "tool.decided"]
        assert decided["outcome"] == "deny", decided
        assert "vault.use of secret 'gh'" in decided["reason"]
        assert not any(e["kind"] == "tool.approval_requested" for e in events)
        assert completed(node, run_id)["error_kind"] == "denied"
        assert echo.received == []
    finally:
        close_node(node)


def test_a_handle_naming_no_secret_is_a_tool_error_before_the_call_runs(
    data_dir: Path, echo: EchoServer
) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        for headers in ({"X-Key": {"vault": "nope"}}, {"X-Key": "token ${vault:nope}"}):
            run_id = run_to_end(node, fetch(f"{echo.base}/echo", headers))
            done = completed(node, run_id)
            assert not done["ok"]
            assert done["error"] == "vault handle 'nope' names no secret", done
            kinds = [e["kind"] for e in tape(node, run_id)]
            assert "tool.decided" not in kinds and "tool.approval_requested" not in kinds
        assert echo.received == []
    finally:
        close_node(node)


def test_a_deleted_secret_fails_the_next_call_by_its_handle(
    data_dir: Path, echo: EchoServer
) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        assert node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}).status == 201
        assert node.call("DELETE", "/v1/vault/gh").status == 200
        assert node.call("GET", "/v1/vault").json()["items"] == []
        run_id = run_to_end(node, fetch(f"{echo.base}/echo", {"X-Key": {"vault": "gh"}}))
        assert completed(node, run_id)["error"] == "vault handle 'gh' names no secret"
        assert echo.received == []
    finally:
        close_node(node)
    assert not any((data_dir / "vault").iterdir())


def test_a_shell_call_gets_a_secret_in_its_environment_and_its_output_is_redacted(
    data_dir: Path,
) -> None:
    require_sandbox()
    node = open_vault_node(data_dir, RecordingProvider(), shell_allowlist=("printenv",))
    try:
        assert node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}).status == 201
        call = {"argv": ["printenv", "GH_TOKEN"], "env": {"GH_TOKEN": {"vault": "gh"}}}
        run_id = run_to_end(node, "/tool shell.run " + json.dumps(call))
        done = completed(node, run_id)
        assert done["ok"], done
        assert json.loads(done["output"])["stdout"] == "[REDACTED]\n"
        for env, field in (
            ({"GH_TOKEN": "plain text"}, "env.GH_TOKEN: must be a vault handle"),
            ({"PATH": {"vault": "gh"}}, "env.PATH: set by the sandbox"),
            ({"LD_PRELOAD": "${vault:gh}"}, "env.LD_PRELOAD: set by the sandbox"),
        ):
            call = {"argv": ["printenv"], "env": env}
            run_id = run_to_end(node, "/tool shell.run " + json.dumps(call))
            done = completed(node, run_id)
            assert not done["ok"] and field in (done["error"] or ""), (env, done)
    finally:
        close_node(node)
    for path in (p for p in data_dir.rglob("*") if p.is_file()):
        assert_nowhere(str(path), path.read_bytes(), (SECRET,))


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "field"),
    [
        ("POST", "/v1/vault", {"name": "", "value": SECRET}, 400, "$.name"),
        ("POST", "/v1/vault", {"name": "has space", "value": SECRET}, 400, "$.name"),
        ("POST", "/v1/vault", {"name": "9lives", "value": SECRET}, 400, "$.name"),
        ("POST", "/v1/vault", {"name": "gh", "value": "short"}, 400, "$.value"),
        ("POST", "/v1/vault", {"name": "gh", "value": "x" * 20_000}, 400, "$.value"),
        ("POST", "/v1/vault", {"name": "gh"}, 400, "$.value"),
        ("POST", "/v1/vault", {"name": "gh", "value": SECRET, "extra": 1}, 400, "$.extra"),
        ("POST", "/v1/vault/bad%20name/rotate", {"value": SECRET}, 404, None),
        ("POST", "/v1/vault/absent/rotate", {"value": SECRET}, 404, None),
        ("DELETE", "/v1/vault/absent", None, 404, None),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(
    data_dir: Path,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    field: str | None,
) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        reply = node.call(method, path, body)
        assert reply.status == status, reply
        assert reply.error["field"] == field, reply.error
        assert SECRET not in reply.body.decode()
        assert node.call("GET", "/v1/vault").json()["items"] == []
    finally:
        close_node(node)


def test_only_admins_manage_the_vault(data_dir: Path) -> None:
    node = open_vault_node(data_dir, RecordingProvider())
    try:
        made = node.call("POST", "/v1/tokens", {"principal": "user:op", "roles": ["operator"]})
        op = f"Bearer {made.json()['token']}"
        assert node.call("GET", "/v1/vault", auth=op).status == 403
        refused = node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}, auth=op)
        assert refused.status == 403, refused
        assert node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET}).status == 201
        again = node.call("POST", "/v1/vault", {"name": "gh", "value": SECRET})
        assert again.status == 409 and "rotate it" in again.error["message"], again
        assert node.call("DELETE", "/v1/vault/gh", auth=op).status == 403
        assert [s["name"] for s in node.call("GET", "/v1/vault").json()["items"]] == ["gh"]
    finally:
        close_node(node)
