"""Issue 21, finding 2: a tool that reads an ordinary config file stores none of its secrets.

A tool's result is JSON text, where a line break is the two characters ``\\n``: a detector that
reads that text sees ``npassword=...`` and lets the password through. Redaction decodes the
result and redacts each value as text, so escaping hides nothing. Through a real node with its
HTTP and gRPC servers: ``fs.read``, ``shell.run`` and ``http.fetch`` of the same files, then the
journal and views files read back as bytes, the export, the SSE stream, the HTTP tape and the
gRPC tape must hold no canary."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from aiohttp import web

from events import JournalReader
from events.sqlite.export import export_records
from tests.tools.conftest import LoopbackServer
from tests.tools.sandboxkit import require_sandbox
from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node, eventually
from transports.config import GrpcConfig, HttpConfig, NodeConfig, ToolsSection
from transports.grpc import start_grpc
from transports.grpc.client import RunStreamClient, open_channel
from transports.http import start_http
from transports.runtime import open_runtime

CONFIG = """# app.ini
host=db.internal
user=app
password=CfgCanary1-hunter2
api_key = "CfgCanary2apikey77"
secret: CfgCanary3-secret-88
token=CfgCanary4tok99x
DBPASSWORD=CfgCanary5db
"""
ESCAPED = '{"settings": "{\\u0022password\\u0022: \\u0022CfgCanary6-esc\\u0022}"}\n'
"""JSON whose inner document is written with ``\\u0022`` quotes."""
CANARIES = tuple(f"CfgCanary{i}" for i in range(1, 7))
FILES = {"app.ini": CONFIG, "settings.json": ESCAPED}


class ConfigServer(LoopbackServer):
    """Serves the same files over HTTP, as a config endpoint would."""

    async def _start(self) -> None:
        app = web.Application()
        for name, text in FILES.items():
            app.router.add_get(f"/{name}", self._file(text))
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        assert isinstance(site._server, asyncio.Server)
        self.port = site._server.sockets[0].getsockname()[1]

    @staticmethod
    def _file(text: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            return web.Response(text=text)

        return handler


@pytest.fixture
def config_server() -> Iterator[ConfigServer]:
    server = ConfigServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def calls(base: str) -> list[str]:
    out = []
    for name in FILES:
        out.append(f'/tool fs.read {{"path": "{name}"}}')
        out.append(f'/tool shell.run {{"argv": ["cat", "{name}"]}}')
        out.append(f'/tool http.fetch {{"url": "{base}/{name}"}}')
    return out


def approve_until_done(node: HttpNode, run_id: str) -> None:
    """Allow every approval the run asks for (Cedar asks one for shell.run and http.fetch
    whatever the posture) until it ends."""

    def step() -> bool:
        tape = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()["items"]
        kinds = {e["kind"] for e in tape}
        for entry in tape:
            if entry["kind"] == "tool.approval_requested" and "tool.completed" not in kinds:
                approval = entry["event"]["approval_id"]
                node.call("POST", f"/v1/approvals/{approval}", {"decision": "allow"})
        return bool(kinds & {"run.completed", "run.failed", "run.cancelled"})

    assert eventually(step, timeout=60), f"run {run_id} did not end"


def assert_clean(where: str, data: bytes | str) -> None:
    raw = data.encode() if isinstance(data, str) else data
    for canary in CANARIES:
        assert canary.encode() not in raw, f"{canary} reached {where}"


def test_config_files_read_by_every_tool_leave_no_secret_anywhere(
    data_dir: Path, config_server: ConfigServer
) -> None:
    require_sandbox()
    workspace = data_dir / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (workspace / name).write_text(text)
    config = NodeConfig(
        http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
        grpc=GrpcConfig(port=0),
        tools=ToolsSection(
            shell_allowlist=("cat",),
            http_allowlist=("127.0.0.1",),
            http_allow_private=("127.0.0.1/32",),
            postures={n: "always_allow" for n in ("fs.read", "shell.run", "http.fetch")},
        ),
    )
    runtime = open_runtime(data_dir, config=config)
    server = start_http(runtime, keepalive_s=15)
    grpc = start_grpc(runtime, port=0)
    node = HttpNode(
        runtime=runtime, server=server, token=(data_dir / "admin.token").read_text().strip()
    )
    try:
        run_ids, seen = [], []
        for call in calls(config_server.base):
            run_id = node.start(f"read it\n{call}")
            approve_until_done(node, run_id)
            events = [json.loads(e.data) for e in node.finish(run_id)]
            (done,) = [e["event"] for e in events if e["kind"] == "tool.completed"]
            assert done["ok"], (call, done)
            assert "[REDACTED]" in done["output"], call
            seen.append(json.dumps(events))
            seen.append(node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").body.decode())
            run_ids.append(run_id)

        async def grpc_tapes() -> list[str]:
            tapes = []
            for run_id in run_ids:
                channel = open_channel(grpc.address)
                try:
                    async with RunStreamClient(channel, node.token, timeout=30) as client:
                        await client.resume(run_id, after_seq=0)
                        tapes.append(repr([e async for e in client.events()]))
                finally:
                    channel.close()
            return tapes

        seen += asyncio.run(grpc_tapes())
    finally:
        grpc.close()
        close_node(node)
    for i, text in enumerate(seen):
        assert_clean(f"client view {i}", text)
    for path in data_dir.iterdir():
        if path.name.startswith(("journal.db", "views.db")):
            assert_clean(path.name, path.read_bytes())
    reader = JournalReader(data_dir / "journal.db")
    try:
        assert_clean("export", json.dumps(list(export_records(reader)), default=str))
    finally:
        reader.close()
