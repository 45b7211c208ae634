"""MCP servers as governed tools, against a real stdio MCP server (the SDK's ``MCPServer``,
tests/tools/mcp/servers/probe_server.py) running in the real bubblewrap sandbox."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.messages import ResolveApproval
from events.catalog import McpToolsListed
from tests import processes
from tests.actors.nodekit import NodeKit
from tests.events.decoded import decoded
from tests.tools.mcp.staged import public_dir, staged
from tools import ExecutionContext, InvalidArguments, ToolCatalog, ToolsConfig, UnknownTool
from tools.build import build_catalog
from tools.mcp.config import McpConfig, McpServerConfig, McpToolConfig
from transports.mcp_servers import journal_tool_lists, mcp_runtime

ROOT = Path(__file__).resolve().parents[3]
VENV_SOURCE = ROOT / ".venv-mcp-servers"
SERVERS_SOURCE = Path(__file__).resolve().parent / "servers"


def venv() -> Path:
    """The servers' venv, staged where the sandbox can bind it (tests/tools/mcp/staged.py)."""
    if not (VENV_SOURCE / "bin" / "python").exists():
        pytest.fail(f"{VENV_SOURCE} is missing: run `make .venv-mcp-servers/.installed`")
    return staged(VENV_SOURCE)


def servers() -> Path:
    """The servers' scripts, staged likewise."""
    return staged(SERVERS_SOURCE)


PROBE_TOOLS = ("add", "crash", "echo", "fail", "flood", "grow", "hang", "image", "late", "snoop")

pytestmark = pytest.mark.usefixtures("sandbox_required")


def probe_server(*args: str, **tools: McpToolConfig) -> McpServerConfig:
    return McpServerConfig(
        command=str(venv() / "bin" / "python"),
        args=(str(servers() / "probe_server.py"), *args),
        read_only_paths=(str(venv()), str(servers())),
        tools=tools or {name: McpToolConfig() for name in PROBE_TOOLS},
        start_timeout_s=30.0,
    )


def catalog_for(
    data: Path,
    allowlist: tuple[str, ...] = (),
    allow_private: tuple[str, ...] = (),
    /,
    **servers: McpServerConfig,
) -> ToolCatalog:
    """A catalog of ``servers`` on the data dir ``data`` (hidden from the sandbox), with the
    http allowlists ``allowlist`` and ``allow_private``."""
    (data / "workspace").mkdir(parents=True, exist_ok=True)
    config = ToolsConfig(
        workspace_dir=str(data / "workspace"),
        shell_hidden_paths=(str(data),),
        http_allowlist=allowlist,
        http_allow_private=allow_private,
    )
    return build_catalog(config, mcp=McpConfig(servers=servers), mcp_state_dir=data / "mcp")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("mcp-node")
    (data / "node.key").write_text("NODE-SECRET-canary-5d1e")
    return data


@pytest.fixture(scope="module")
def catalog(data_dir: Path) -> Iterator[ToolCatalog]:
    cat = catalog_for(data_dir, probe=probe_server())
    yield cat
    cat.close()


def call(catalog: ToolCatalog, name: str, args: dict[str, Any], timeout: float = 20.0) -> Any:
    ctx = ExecutionContext.start(Path("/"), timeout)
    return catalog.execute(name, catalog.validate(name, args), ctx)


def test_a_tool_runs_and_its_structured_result_comes_back(catalog: ToolCatalog) -> None:
    result = call(catalog, "mcp.probe.add", {"a": 2, "b": 40})
    assert result.ok, result.error
    body = json.loads(result.output)
    assert body["structured"] == {"result": 42}
    assert body["content"] == [{"type": "text", "text": "42"}]


def test_the_model_is_offered_the_servers_own_schema(catalog: ToolCatalog) -> None:
    schema = catalog.spec("mcp.probe.add").json_schema()
    assert schema["required"] == ["a", "b"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert catalog.spec("mcp.probe.add").default_posture == "ask_each_time"


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"a": "two", "b": 1}, "at `$.a`"),
        ({"a": 1}, "'b' is a required property"),
        ({"a": 1, "b": 2, "c": 3}, "unknown field `c`"),
    ],
)
def test_arguments_are_checked_against_the_schema_before_any_call(
    catalog: ToolCatalog, args: dict[str, Any], problem: str
) -> None:
    with pytest.raises(InvalidArguments, match=r"mcp\.probe\.add") as caught:
        catalog.validate("mcp.probe.add", args)
    assert problem in str(caught.value)


def test_the_sandbox_hides_the_data_dir_the_environment_and_the_network(
    catalog: ToolCatalog, data_dir: Path
) -> None:
    listener = _listening_socket()
    try:
        port = listener.getsockname()[1]
        secret = data_dir / "node.key"
        result = call(
            catalog, "mcp.probe.snoop", {"path": str(secret), "host": "127.0.0.1", "port": port}
        )
        assert result.ok, result.error
        seen = json.loads(result.output)["structured"]
        assert seen["read"].startswith("refused"), seen
        assert seen["connect"].startswith("refused"), seen
        assert seen["env"] == "HOME,LANG,PATH,PWD"  # nothing of the node's environment
        assert seen["uid"] != "0"
        result = call(
            catalog, "mcp.probe.snoop", {"path": "/proc/1/environ", "host": "1.1.1.1", "port": 53}
        )
        assert "NODE-SECRET" not in result.output
    finally:
        listener.close()


def test_images_are_typed_references_never_bytes(catalog: ToolCatalog) -> None:
    result = call(catalog, "mcp.probe.image", {})
    (block,) = json.loads(result.output)["content"]
    assert block == {
        "type": "image",
        "mime_type": "image/png",
        "bytes": 4,
        "sha256": "054edec1d0211f624fed0cbca9d4f9400b0e491c43742af2c5b0abebf0c990d8",
    }


def test_an_error_result_is_a_tool_error(catalog: ToolCatalog) -> None:
    result = call(catalog, "mcp.probe.fail", {})
    assert not result.ok and result.error_kind == "failed"
    assert "'probe'" in (result.error or "")


def test_a_crash_mid_call_is_a_tool_error_and_the_next_call_restarts_the_server(
    catalog: ToolCatalog,
) -> None:
    runtime = mcp_runtime(catalog)
    assert runtime is not None
    starts = runtime.states()[0].starts
    result = call(catalog, "mcp.probe.crash", {})
    assert not result.ok and result.error_kind == "failed"
    assert "closed the connection" in (result.error or "")
    assert call(catalog, "mcp.probe.add", {"a": 1, "b": 1}).ok
    assert runtime.states()[0].starts == starts + 1


def test_a_hung_call_ends_at_its_deadline_and_on_cancel(catalog: ToolCatalog) -> None:
    result = call(catalog, "mcp.probe.hang", {}, timeout=1.0)
    assert not result.ok and result.error_kind == "timeout"
    cancel = threading.Event()
    ctx = ExecutionContext.start(Path("/"), 60.0, cancel)
    threading.Timer(0.5, cancel.set).start()
    args = catalog.validate("mcp.probe.hang", {})
    result = catalog.execute("mcp.probe.hang", args, ctx)
    assert not result.ok and result.error_kind == "cancelled"
    assert call(catalog, "mcp.probe.add", {"a": 1, "b": 2}).ok


def test_a_flood_of_output_is_a_tool_error(catalog: ToolCatalog) -> None:
    result = call(catalog, "mcp.probe.flood", {})
    assert not result.ok
    assert len(result.output.encode()) <= catalog.spec("mcp.probe.flood").output_cap_bytes
    assert call(catalog, "mcp.probe.add", {"a": 1, "b": 2}).ok


def test_a_tool_the_server_grows_mid_run_cannot_be_called(catalog: ToolCatalog) -> None:
    late = catalog.spec("mcp.probe.late")
    assert late.unavailable is not None and "does not announce" in late.unavailable
    assert call(catalog, "mcp.probe.grow", {}).ok
    runtime = mcp_runtime(catalog)
    assert runtime is not None
    for _ in range(100):
        if any(t.name == "late" for t in runtime.states()[0].tools or ()):
            break
        time.sleep(0.05)
    assert any(t.name == "late" for t in runtime.states()[0].tools or ())  # it was announced
    result = call(catalog, "mcp.probe.late", {})
    assert not result.ok and result.error_kind == "denied"
    with pytest.raises(UnknownTool):
        catalog.spec("mcp.probe.unlisted")


def test_tools_not_named_in_config_are_not_in_the_catalog(tmp_path: Path) -> None:
    cat = catalog_for(tmp_path, probe=probe_server(add=McpToolConfig(posture="always_allow")))
    try:
        assert [n for n in cat.names() if n.startswith("mcp.")] == ["mcp.probe.add"]
        assert cat.spec("mcp.probe.add").default_posture == "always_allow"
    finally:
        cat.close()


def test_a_missing_server_leaves_its_tools_unavailable_with_the_reason(tmp_path: Path) -> None:
    missing = McpServerConfig(command="no-such-mcp-server", tools={"x": McpToolConfig()})
    cat = catalog_for(tmp_path, gone=missing)
    try:
        reason = cat.unavailable()["mcp.gone.x"]
        assert "no-such-mcp-server" in reason and "'gone'" in reason
        assert cat.spec("mcp.gone.x").default_posture == "disabled"
        result = call(cat, "mcp.gone.x", {})
        assert not result.ok
    finally:
        cat.close()


def test_a_server_slow_to_start_leaves_its_tools_unavailable(tmp_path: Path) -> None:
    slow = msgspec.structs.replace(probe_server("--slow"), start_timeout_s=1.0)
    cat = catalog_for(tmp_path, slow=slow)
    try:
        assert "did not start in time" in cat.unavailable()["mcp.slow.add"]
    finally:
        cat.close()


def test_a_wrong_protocol_version_leaves_its_tools_unavailable(tmp_path: Path) -> None:
    wrong = msgspec.structs.replace(
        probe_server(), args=(str(servers() / "wrong_version_server.py"),)
    )
    cat = catalog_for(tmp_path, wrong=wrong)
    try:
        assert "mcp.wrong.add" in cat.unavailable()
    finally:
        cat.close()


def test_an_approved_call_through_a_real_node_and_the_tool_lists_on_the_journal(
    tmp_path: Path,
) -> None:
    servers = {"probe": probe_server(add=McpToolConfig(), grow=McpToolConfig())}
    cat = catalog_for(tmp_path / "cat", **servers)
    kit = NodeKit(tmp_path / "node", catalog=cat)
    try:
        journal_tool_lists(cat, kit.journal, {"probe": {"add", "grow"}})
        ticket = kit.start_run('add\n/tool mcp.probe.add {"a": 20, "b": 22}')
        request = kit.wait_for_approval(ticket.run_id)  # ask_each_time by default
        kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow"))
        end = kit.wait_for_end(ticket.run_id)
        assert type(end).__name__ == "RunCompleted"
        (done,) = kit.events(ticket.run_id, "tool.completed")
        assert done.ok and json.loads(done.output)["structured"] == {"result": 42}
        assert call(cat, "mcp.probe.grow", {}).ok  # the server announces `late`
        lists = kit.wait_until(lambda: _listed(kit) if len(_listed(kit)) >= 2 else None)
        assert lists[1].added == ("late",)
        assert "late" in lists[1].tools and "late" not in lists[1].allowed
        ticket, end = kit.run("/tool mcp.probe.late {}")  # never offered, never run
        (done,) = kit.events(ticket.run_id, "tool.completed")
        assert not done.ok
        lists = _listed(kit)
        assert lists[0].server == "probe" and "add" in lists[0].added
        assert lists[0].allowed == ("add", "grow") and "echo" in lists[0].tools
        digests = dict(zip(lists[0].tools, lists[0].schema_sha256, strict=True))
        assert all(re.fullmatch("[0-9a-f]{64}", d) for d in digests.values())  # not redacted
    finally:
        kit.close()
        cat.close()


def _listed(kit: NodeKit) -> list[McpToolsListed]:
    return [decoded(row, McpToolsListed) for row in kit.journal.read_stream("mcp/probe")]


def _listening_socket() -> Any:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """The probe server on Streamable HTTP, on a loopback port (unconfined: reel is its client)."""
    import socket
    import subprocess

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [str(venv() / "bin" / "python"), str(servers() / "probe_server.py"), "--http", str(port)]
    with processes.spawned(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
        for _ in range(600):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize(
    ("allowlist", "private", "problem"),
    [
        ((), (), "host '127.0.0.1' is not in the http allowlist"),
        (("127.0.0.1",), (), "resolves to 127.0.0.1 (loopback"),
    ],
)
def test_an_http_server_is_reached_only_as_egress_allows(
    tmp_path: Path,
    http_server: str,
    allowlist: tuple[str, ...],
    private: tuple[str, ...],
    problem: str,
) -> None:
    config = ToolsConfig(
        workspace_dir=str(tmp_path), http_allowlist=allowlist, http_allow_private=private
    )
    server = McpServerConfig(url=http_server, tools={"add": McpToolConfig()})
    cat = build_catalog(config, mcp=McpConfig(servers={"web": server}), mcp_state_dir=tmp_path)
    try:
        assert problem in cat.unavailable()["mcp.web.add"]
        assert cat.spec("mcp.web.add").default_posture == "disabled"
        result = call(cat, "mcp.web.add", {})  # its schema was never read: no arguments
        assert not result.ok and result.error_kind == "denied"
    finally:
        cat.close()


def test_an_allowed_http_server_on_loopback_runs_its_tools(
    tmp_path: Path, http_server: str
) -> None:
    config = ToolsConfig(
        workspace_dir=str(tmp_path),
        http_allowlist=("127.0.0.1",),
        http_allow_private=("127.0.0.1/32",),
    )
    server = McpServerConfig(url=http_server, tools={"add": McpToolConfig()})
    cat = build_catalog(config, mcp=McpConfig(servers={"web": server}), mcp_state_dir=tmp_path)
    try:
        assert cat.spec("mcp.web.add").capabilities == frozenset({"net.egress"})
        result = call(cat, "mcp.web.add", {"a": 40, "b": 2})
        assert result.ok, result.error
        assert json.loads(result.output)["structured"] == {"result": 42}
    finally:
        cat.close()


def test_a_read_only_path_inside_the_data_dir_is_refused() -> None:
    # Outside /tmp (a path under it is refused for another reason, the sandbox's own /tmp).
    data = Path(tempfile.mkdtemp(prefix="mcp-data-", dir=public_dir()))
    (data / "secrets").mkdir(parents=True)
    server = msgspec.structs.replace(
        probe_server(), read_only_paths=(*probe_server().read_only_paths, str(data / "secrets"))
    )
    cat = catalog_for(data, probe=server)
    try:
        assert "lies inside the node's" in cat.unavailable()["mcp.probe.add"]
    finally:
        cat.close()
        shutil.rmtree(data, ignore_errors=True)
