"""`reel approvals`, `reel policy check` and `reel tools` as a user runs them, on real data dirs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from actors.messages import ResolveApproval, StartRun
from events.catalog import ApprovalRequested, ToolCompleted
from tests import processes
from tests.events.decoded import decoded
from tests.transports.cli.nodekit import bare_environment
from transports.config import NodeConfig, ToolsSection
from transports.runtime import open_runtime

REEL = str(Path(sys.executable).with_name("reel"))
CONFIG_TOML = '[tools]\nshell_allowlist = ["echo"]\n'
CHILD = """
import sys, time
from pathlib import Path
from actors.messages import StartRun
from transports.runtime import open_runtime
rt = open_runtime(Path(sys.argv[1]))
t = rt.node.ask(StartRun(text='/tool shell.run {"argv": ["echo", "later"]}', create=True))
print(t.run_id, flush=True)
time.sleep(60)
"""


def reel(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run([REEL, *args], capture_output=True, text=True, timeout=60)


def node_died_waiting(data: Path) -> str:
    """A node that asked for an approval, then was killed: returns the run id."""
    (data / "config.toml").write_text(CONFIG_TOML)
    with processes.spawned(
        [sys.executable, "-c", CHILD, data], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        run_id: str = child.stdout.readline().strip()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listed = reel("approvals", "list", "--data", str(data), "--json")
            if listed.returncode == 0 and json.loads(listed.stdout):
                break
            time.sleep(0.1)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    return run_id


def test_decide_an_approval_offline_and_the_run_continues_on_start(tmp_path: Path) -> None:
    run_id = node_died_waiting(tmp_path)
    listed = reel("approvals", "list", "--data", str(tmp_path))
    assert listed.returncode == 0 and "shell.run" in listed.stdout and "pending" in listed.stdout
    approval = json.loads(reel("approvals", "list", "--data", str(tmp_path), "--json").stdout)[0]
    assert approval["run_id"] == run_id and approval["state"] == "pending"

    unknown = reel("approvals", "approve", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--data", str(tmp_path))
    assert unknown.returncode == 2 and unknown.stderr.startswith("reel: error: no approval")
    bad_scope = reel(
        "approvals",
        "approve",
        approval["approval_id"],
        "--scope",
        "forever",
        "--data",
        str(tmp_path),
    )
    assert bad_scope.returncode == 2
    aid = approval["approval_id"]
    bad_prefix = reel(
        "approvals",
        "approve",
        aid,
        "--scope",
        "session",
        "--match",
        "prefix",
        "--data",
        str(tmp_path),
    )
    assert bad_prefix.returncode == 2 and "--prefix: must not be empty" in bad_prefix.stderr

    ok = reel(
        "approvals",
        "approve",
        aid,
        "--scope",
        "session",
        "--match",
        "prefix",
        "--prefix",
        "echo",
        "--data",
        str(tmp_path),
    )
    assert ok.returncode == 0, ok.stderr
    assert "allow by cli" in ok.stdout
    assert "arguments starting with 'echo' in this session" in ok.stdout
    again = reel("approvals", "deny", approval["approval_id"], "--data", str(tmp_path))
    assert again.returncode == 1 and "already resolved" in again.stderr

    rt = open_runtime(tmp_path)
    try:
        assert [p.state.run_id for p in rt.node.recovery.resumed] == [run_id]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            kinds = [e.kind for e in rt.journal.read_correlated(run_id)]
            if kinds[-1] == "run.completed":
                break
            time.sleep(0.05)
        events = [e.decode() for e in rt.journal.read_correlated(run_id)]
    finally:
        rt.close(grace_s=0)
    completed = [e for e in events if isinstance(e, ToolCompleted)]
    assert completed and completed[-1].ok and "later" in completed[-1].output
    assert type(events[-1]).__name__ == "RunCompleted"


def test_deciding_while_a_node_without_an_api_holds_the_data_dir_says_so(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG_TOML)
    with processes.spawned(
        [sys.executable, "-c", CHILD, tmp_path], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        child.stdout.readline()
        out = reel("approvals", "approve", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--data", str(tmp_path))
        assert out.returncode == 2 and out.stderr.count("\n") == 1
        assert "a node holds" in out.stderr and "cannot be reached" in out.stderr
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    "command",
    [["approvals", "approve", "01ARZ3NDEKTSV4RRFFQ69G5FAV"], ["chat", "hello"]],
    ids=["http", "grpc"],
)
def test_a_holder_without_an_api_is_not_guessed_at_the_configured_port(
    tmp_path: Path, command: list[str]
) -> None:
    """The data dir's holder wrote no node.json; another process listens on the ports its
    config names. The command must not connect there (it would send this data dir's admin
    token to whoever listens): it says the holder has no API, and the listener hears nothing."""
    heard: list[bytes] = []
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]

    def listen(server: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.settimeout(2)
                    heard.append(conn.recv(4096))

    for server in listeners:
        threading.Thread(target=listen, args=(server,), daemon=True).start()
    http_port, grpc_port = (s.getsockname()[1] for s in listeners)
    (tmp_path / "config.toml").write_text(
        f"{CONFIG_TOML}[http]\nport = {http_port}\n[grpc]\nport = {grpc_port}\n"
    )
    try:
        with processes.spawned(
            [sys.executable, "-c", CHILD, tmp_path], stdout=subprocess.PIPE, text=True
        ) as child:
            assert child.stdout is not None
            child.stdout.readline()
            out = processes.run(
                [REEL, *command, "--data", tmp_path],
                env=bare_environment(),  # no REEL_*_PORT: nothing names an address
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
            child.kill()
            child.wait()
    finally:
        for server in listeners:
            server.close()
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "no node.json" in out.stderr
    assert heard == []


def test_revoke_an_always_grant(tmp_path: Path) -> None:
    config = NodeConfig(tools=ToolsSection(shell_allowlist=("echo",)))
    rt = open_runtime(tmp_path, config=config)
    try:
        ticket = rt.node.ask(
            StartRun(text='/tool shell.run {"argv": ["echo", "1"]}', create=True, principal="ops")
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pending = [
                decoded(e, ApprovalRequested)
                for e in rt.journal.read_correlated(ticket.run_id)
                if e.kind == "tool.approval_requested"
            ]
            if pending:
                break
            time.sleep(0.02)
        rt.node.ask(
            ResolveApproval(approval_id=pending[0].approval_id, decision="allow", scope="always")
        )
        while rt.journal.read_correlated(ticket.run_id)[-1].kind != "run.completed":
            time.sleep(0.02)
    finally:
        rt.close(grace_s=0)
    nothing = reel(
        "approvals", "revoke", "--principal", "bob", "--tool", "shell.run", "--data", str(tmp_path)
    )
    assert nothing.returncode == 1 and "no always grant" in nothing.stderr
    bad = reel(
        "approvals", "revoke", "--principal", "ops", "--tool", "Shell Run", "--data", str(tmp_path)
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "--tool: " in bad.stderr
    out = reel(
        "approvals", "revoke", "--principal", "ops", "--tool", "shell.run", "--data", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    rt = open_runtime(tmp_path, config=config)
    try:
        assert not rt.node.services.gate.has_always("ops", "shell.run")
        assert rt.node.recovery.always_grants == 0
        (row,) = rt.journal.read_stream("grants")
        assert (row.kind, row.principal) == ("grant.revoked", "cli")
    finally:
        rt.close(grace_s=0)


def test_policy_check_names_the_deciding_policies(tmp_path: Path) -> None:
    out = reel(
        "policy", "check", "--principal", "user:ops", "--tool", "shell.run", "--data", str(tmp_path)
    )
    assert out.returncode == 0, out.stderr
    assert "decision: approval_required" in out.stdout
    assert "baseline.tool.approved" in out.stdout
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / "ops.cedar").write_text(
        '@id("shell")\npermit (principal == Principal::"user:ops",'
        ' action == Action::"tool.execute", resource == Tool::"shell.run");\n'
    )
    (tmp_path / "config.toml").write_text('[tools]\npostures = { "shell.run" = "always_allow" }\n')
    allowed = reel(
        "policy", "check", "--principal", "user:ops", "--tool", "shell.run", "--data", str(tmp_path)
    )
    assert "decision: allow" in allowed.stdout and "ops.shell" in allowed.stdout
    other = reel(
        "policy", "check", "--principal", "user:eve", "--tool", "shell.run", "--data", str(tmp_path)
    )
    assert "decision: approval_required" in other.stdout
    unknown = reel(
        "policy", "check", "--principal", "user:ops", "--tool", "nope", "--data", str(tmp_path)
    )
    assert unknown.returncode == 2 and "unknown tool 'nope'" in unknown.stderr
    for nobody in ("ops", "bad one", "channel:hook:ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"):
        refused = reel(
            "policy", "check", "--principal", nobody, "--tool", "echo", "--data", str(tmp_path)
        )
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "--principal: not a principal a request can carry" in refused.stderr
        assert nobody not in refused.stderr


def test_a_policy_that_does_not_validate_stops_the_node(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "bad.cedar").write_text(
        'permit (principal, action, resource) when { resource.colour == "red" };'
    )
    out = reel("node", "--data", str(tmp_path))
    assert out.returncode == 2
    assert "bad.cedar" in out.stderr and "colour" in out.stderr
    assert out.stderr.count("\n") == 1


def test_tools_lists_the_catalog_with_postures(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[tools]\npostures = { "echo" = "disabled" }\n')
    out = reel("tools", "--data", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    tools = {t["name"]: t for t in json.loads(out.stdout)}
    assert tools["echo"]["posture"] == "disabled"
    assert tools["shell.run"]["risk"] == "critical"
    assert tools["shell.run"]["capabilities"] == ["process.exec"]
    assert tools["fs.read"]["parameters"]["properties"]["path"]["type"] == "string"
