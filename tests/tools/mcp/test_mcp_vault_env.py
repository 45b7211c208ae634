"""Vault handles in an MCP server's ``env`` (docs/mcp.md, "Secrets"), through the node's own
composition (``open_runtime``: real journal, vault, Cedar) and a real stdio server in the
sandbox that echoes its environment back (tests/tools/mcp/servers/env_server.py).

The value reaches the server and nothing else: not the journal, the data dir, the tool's result
or error, the server listing, the config; the node's ``vault.use`` is decided and recorded at
each start; a refusal or a handle naming no secret leaves the server unavailable with the
reason naming the handle; a rotation reaches the server at its next start.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.messages import StartRun
from events.catalog import McpSecretsDecided, RunCompleted
from tests.tools.mcp.test_mcp_tools import catalog_for, servers, venv
from tools.handles import VaultHandle
from tools.mcp.config import McpConfig, McpServerConfig, McpToolConfig
from tools.mcp.transport import NOT_JSON_RPC, parsed
from transports.config import NodeConfig
from transports.mcp_servers import mcp_runtime, server_rows
from transports.runtime import Runtime, open_runtime

pytestmark = pytest.mark.usefixtures("sandbox_required")

SECRET = "correct-horse-battery-staple-42"
"""No detector shape: only the vault's exact-match terms can find it."""
ROTATED = "second-horse-battery-staple-43"
TOOLS = {
    name: McpToolConfig(posture="always_allow", read_only=True)
    for name in ("env", "env_digest", "env_fail", "env_print")
}


def config(env: dict[str, str | VaultHandle]) -> NodeConfig:
    server = McpServerConfig(
        command=str(venv() / "bin" / "python"),
        args=(str(servers() / "env_server.py"),),
        read_only_paths=(str(venv()), str(servers())),
        env=env,
        tools=TOOLS,
        start_timeout_s=30.0,
    )
    return NodeConfig(mcp=McpConfig(servers={"envy": server}))


HANDLES: dict[str, str | VaultHandle] = {
    "TOKEN": VaultHandle("api_key"),
    "AUTH": "Bearer ${vault:api_key}",
    "PLAIN": "not-secret",
}


def with_secret(data_dir: Path, value: str = SECRET) -> None:
    """``api_key`` set in the data dir's vault, by a node with no MCP server; the env tools
    allowed unasked (the baseline asks a human for any stdio server's tool: process.exec)."""
    (data_dir / "policies").mkdir(exist_ok=True)
    (data_dir / "policies" / "envy.cedar").write_text(
        "".join(
            f'permit (principal, action == Action::"tool.execute", '
            f'resource == Tool::"mcp.envy.{tool}");\n'
            for tool in TOOLS
        )
    )
    runtime = open_runtime(data_dir, config=NodeConfig())
    try:
        runtime.vault.set(runtime.journal, "api_key", value, by="admin")
    finally:
        runtime.close(grace_s=0.5)


@pytest.fixture
def node(data_dir: Path) -> Iterator[Runtime]:
    with_secret(data_dir)
    runtime = open_runtime(data_dir, config=config(HANDLES))
    try:
        yield runtime
    finally:
        runtime.close(grace_s=0.5)


def call(runtime: Runtime, tool: str, name: str) -> Any:
    """Run one call of ``mcp.envy.TOOL`` through a run; its ``tool.completed``."""
    text = f"/tool mcp.envy.{tool} " + json.dumps({"name": name})
    ticket = runtime.node.ask(StartRun(text=f"env\n{text}", session_key="env", create=True))
    journal = runtime.journal
    for _ in range(3000):
        head = journal.committed_position
        tape = [s.decode() for s in journal.read_correlated(ticket.run_id)]
        if any(isinstance(e, RunCompleted) for e in tape):
            (done,) = [e for e in tape if type(e).__name__ == "ToolCompleted"]
            return done
        journal.wait_for(head, timeout=0.1)
    raise AssertionError("the run did not complete")


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def everything_under(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file())


def test_the_server_gets_the_value_and_nothing_else_does(node: Runtime, data_dir: Path) -> None:
    assert node.node.services.catalog.unavailable() == {}
    token = call(node, "env_digest", "TOKEN")
    assert token.ok and json.loads(token.output)["content"][0]["text"] == digest(SECRET)
    auth = call(node, "env_digest", "AUTH")
    assert json.loads(auth.output)["content"][0]["text"] == digest(f"Bearer {SECRET}")
    plain = call(node, "env", "PLAIN")
    assert "not-secret" in plain.output

    echoed = call(node, "env", "TOKEN")  # the server sends the value back: redacted
    assert echoed.ok and SECRET not in echoed.output and "[REDACTED]" in echoed.output
    failed = call(node, "env_fail", "AUTH")  # ...and in an error
    assert not failed.ok and SECRET not in (failed.error or "")

    (decided,) = [
        s for s in node.journal.read_stream("mcp/envy") if s.kind == "mcp.secrets_decided"
    ]
    event = decided.decode()
    assert isinstance(event, McpSecretsDecided)
    assert (decided.principal, event.outcome, event.secrets) == ("node", "allow", ("api_key",))
    assert event.policy_ids == ("baseline.vault.use.mcp_server",)

    rows = server_rows(node.node.services.catalog, lambda spec: spec.default_posture)
    assert SECRET not in msgspec.json.encode(rows).decode()
    dumped = msgspec.json.encode(node.config).decode()
    assert SECRET not in dumped and '"vault":"api_key"' in dumped
    assert SECRET.encode() not in everything_under(data_dir)


def test_a_value_the_server_prints_outside_the_framing_reaches_no_log(
    node: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    """The call goes on, and no start of the value is logged or returned (exact-match
    redaction would not find a value cut short)."""
    caplog.set_level(logging.DEBUG)
    printed = call(node, "env_print", "TOKEN")
    assert printed.ok and "printed" in printed.output
    logged = caplog.text + printed.output
    assert not [SECRET[:n] for n in range(8, len(SECRET) + 1) if SECRET[:n] in logged]


def test_a_line_outside_the_framing_reaches_the_session_without_its_text() -> None:
    """What the transport hands the SDK for a bare line: an error that quotes none of it
    (pydantic's own error quotes the line's start)."""
    error = parsed(SECRET.encode() + b"\n")
    assert isinstance(error, ValueError) and str(error) == NOT_JSON_RPC
    assert not isinstance(parsed(b'{"jsonrpc": "2.0", "method": "ping", "id": 1}\n'), ValueError)


def test_a_read_only_mcp_tool_is_read_only_by_its_catalog_entry(node: Runtime) -> None:
    catalog = node.node.services.catalog
    assert catalog.reads_only("mcp.envy.env", json.dumps({"name": "X"}))
    assert not catalog.reads_only("mcp.envy.env", json.dumps({"nom": "X"}))  # invalid: alone


def test_a_rotation_reaches_the_server_at_its_next_start(node: Runtime) -> None:
    assert json.loads(call(node, "env_digest", "TOKEN").output)["content"][0]["text"] == digest(
        SECRET
    )
    node.vault.rotate(node.journal, "api_key", ROTATED, by="admin")
    running = call(node, "env_digest", "TOKEN")  # the running server keeps what it started with
    assert json.loads(running.output)["content"][0]["text"] == digest(SECRET)

    runtime = mcp_runtime(node.node.services.catalog)
    assert runtime is not None
    runtime.servers["envy"].reset("test: restart")  # as a crash or the node's restart would
    after = call(node, "env_digest", "TOKEN")
    assert json.loads(after.output)["content"][0]["text"] == digest(ROTATED)
    decisions = [s for s in node.journal.read_stream("mcp/envy") if s.kind == "mcp.secrets_decided"]
    assert len(decisions) == 2  # decided again at the second start


def test_a_handle_that_names_no_secret_leaves_the_server_unavailable(data_dir: Path) -> None:
    runtime = open_runtime(data_dir, config=config({"TOKEN": VaultHandle("no_such_key")}))
    try:
        unavailable = runtime.node.services.catalog.unavailable()
        reason = unavailable["mcp.envy.env"]
        assert "env.TOKEN" in reason and "'no_such_key' names no secret" in reason
        (row,) = server_rows(runtime.node.services.catalog, lambda s: s.default_posture).items
        assert row.state == "failed" and row.reason is not None and "no_such_key" in row.reason
        kinds = [s.kind for s in runtime.journal.read_stream("mcp/envy")]
        assert "mcp.secrets_decided" not in kinds  # nothing to decide about a missing secret
    finally:
        runtime.close(grace_s=0.5)


def test_a_node_refused_vault_use_starts_no_server_and_records_the_refusal(
    data_dir: Path,
) -> None:
    with_secret(data_dir)
    (data_dir / "policies").mkdir(exist_ok=True)
    (data_dir / "policies" / "no_envy.cedar").write_text(
        '@id("ops.no_envy")\n'
        'forbid (principal == Principal::"node", action == Action::"vault.use", '
        'resource == Secret::"api_key") when { context.tool == "mcp.envy" };\n'
    )
    runtime = open_runtime(data_dir, config=config(HANDLES))
    try:
        reason = runtime.node.services.catalog.unavailable()["mcp.envy.env"]
        assert "vault.use of secret 'api_key' by the node" in reason
        (decided,) = [
            e
            for e in (s.decode() for s in runtime.journal.read_stream("mcp/envy"))
            if isinstance(e, McpSecretsDecided)
        ]
        assert decided.outcome == "deny" and decided.policy_ids == ("no_envy.ops.no_envy",)
        assert decided.reason.startswith("vault.use of 'api_key' refused (")
    finally:
        runtime.close(grace_s=0.5)
    assert SECRET.encode() not in everything_under(data_dir)


def test_an_offline_catalog_starts_no_server_whose_env_names_secrets(tmp_path: Path) -> None:
    """``reel tools`` without a node builds the catalog with no vault: nothing is resolved."""
    (server,) = config(HANDLES).mcp.servers.values()
    catalog = catalog_for(tmp_path / "offline", envy=server)
    try:
        reason = catalog.unavailable()["mcp.envy.env"]
    finally:
        catalog.close()
    assert "env names vault secrets (api_key): only the node resolves them" in reason
