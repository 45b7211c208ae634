"""MCP servers through a real ``reel node``: ``reel tools``, the ready line, ``reel mcp
list|tools|test`` (the HTTP routes behind them), a server that cannot start, and the servers
stopped at drain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests import processes
from tests.tools.mcp.test_mcp_tools import servers, venv

pytestmark = pytest.mark.usefixtures("sandbox_required")


def _config(data: Path) -> None:
    data.mkdir(parents=True, exist_ok=True)
    python, scripts = venv() / "bin" / "python", servers()
    (data / "config.toml").write_text(
        f"""
[mcp.servers.probe]
command = "{python}"
args = ["{scripts / "probe_server.py"}"]
read_only_paths = ["{venv()}", "{scripts}"]
start_timeout_s = 60

[mcp.servers.probe.tools.add]
risk = "low"

[mcp.servers.probe.tools.echo]
posture = "always_allow"

[mcp.servers.gone]
command = "no-such-mcp-server"

[mcp.servers.gone.tools.x]
"""
    )


def _reel(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [processes.REEL, *(str(a) for a in args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_node_lists_tests_and_stops_its_mcp_servers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _config(data)
    offline = _reel("mcp", "list", "--data", data)  # no node: config only, nothing started
    assert offline.returncode == 0, offline.stderr
    assert "probe  stdio  idle" in offline.stdout
    catalog = _reel("tools", "--data", data)  # starts the servers to read their lists, then stops
    assert catalog.returncode == 0, catalog.stderr
    assert "unavailable: MCP server 'gone': " in catalog.stdout
    assert "mcp.probe.add" in catalog.stdout
    env = {**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    with processes.node(
        "--data", data, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as node:
        assert node.stdout is not None
        line = node.stdout.readline()
        assert line.startswith("reel node ready: "), line
        assert "(mcp.gone.x disabled: MCP server 'gone': " in line
        assert "mcp.probe.add disabled" not in line

        listed = _reel("mcp", "list", "--data", data, "--json")
        assert listed.returncode == 0, listed.stderr
        servers = {s["name"]: s for s in json.loads(listed.stdout)}
        assert servers["probe"]["state"] == "running"
        assert servers["gone"]["state"] == "failed"
        assert "no-such-mcp-server" in servers["gone"]["reason"]
        tools = {t["tool"]: t for t in servers["probe"]["tools"]}
        assert tools["mcp.probe.add"]["allowed"] and tools["mcp.probe.add"]["posture"] == (
            "ask_each_time"
        )
        assert tools["mcp.probe.echo"]["posture"] == "always_allow"
        assert not tools["mcp.probe.crash"]["allowed"]  # announced, never allowed
        assert tools["mcp.probe.crash"]["unavailable"] == "not allowed in config"

        shown = _reel("mcp", "tools", "probe", "--data", data)
        assert "mcp.probe.add  allowed  posture=ask_each_time" in shown.stdout
        assert "mcp.probe.snoop  not-allowed  posture=disabled" in shown.stdout

        tested = _reel("mcp", "test", "probe", "--data", data)
        assert tested.returncode == 0, tested.stderr
        assert tested.stdout.startswith("probe  running  tools=")
        failed = _reel("mcp", "test", "gone", "--data", data)
        assert failed.returncode == 1 and "gone  failed" in failed.stdout
        unknown = _reel("mcp", "test", "nope", "--data", data)
        assert unknown.returncode == 2
        assert "no MCP server 'nope'" in unknown.stderr and "Traceback" not in unknown.stderr

        assert _probe_servers()  # running in its sandbox...
        node.send_signal(signal.SIGTERM)
        _, err = node.communicate(timeout=60)
        assert node.returncode == 0, err
    ready = [json.loads(x) for x in err.splitlines() if '"reel node ready"' in x]
    assert "mcp.gone.x" in ready[0]["unavailable_tools"]
    assert "Traceback" not in err, err[-4000:]
    assert not _probe_servers()  # ...and stopped at drain


def _probe_servers() -> list[int]:
    """Processes running this checkout's probe server (the suite runs one node at a time)."""
    script = str(servers() / "probe_server.py").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if script in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
