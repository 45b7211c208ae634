"""A reference MCP server nobody here wrote (npm's @modelcontextprotocol/server-everything, on
Debian's node, pinned in tests/tools/mcp/npm/) in the sandbox: its tools run, its image is a
typed reference, and its ``get-env`` tool sees none of the node's environment."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tools.mcp.staged import staged
from tests.tools.mcp.test_mcp_tools import ROOT, call
from tools import ToolCatalog, ToolsConfig
from tools.build import build_catalog
from tools.mcp.config import McpConfig, McpServerConfig, McpToolConfig

NPM_SOURCE = ROOT / ".cache" / "mcp-npm"
ENTRY = Path("node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
CANARY = "NODE-ENV-CANARY-3f9a"

pytestmark = pytest.mark.usefixtures("sandbox_required")


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolCatalog]:
    if not (NPM_SOURCE / ENTRY).exists():
        pytest.fail(f"{NPM_SOURCE / ENTRY} is missing: run `make .cache/mcp-npm/.installed`")
    npm = staged(NPM_SOURCE)  # where the sandbox can bind it (tests/tools/mcp/staged.py)
    data = tmp_path_factory.mktemp("everything")
    os.environ["REEL_TEST_CANARY"] = CANARY  # in the node's environment, never the server's
    server = McpServerConfig(
        command="node",
        args=(str(npm / ENTRY), "stdio"),
        read_only_paths=(str(npm),),
        tools={name: McpToolConfig() for name in ("echo", "get-sum", "get-tiny-image", "get-env")},
        start_timeout_s=60,
    )
    config = ToolsConfig(workspace_dir=str(data))
    catalog = build_catalog(
        config, mcp=McpConfig(servers={"everything": server}), mcp_state_dir=data / "mcp"
    )
    try:
        yield catalog
    finally:
        catalog.close()
        del os.environ["REEL_TEST_CANARY"]


def test_the_reference_servers_tools_run_in_the_sandbox(everything: ToolCatalog) -> None:
    assert everything.unavailable() == {}
    result = call(everything, "mcp.everything.get-sum", {"a": 19, "b": 23})
    assert result.ok, result.error
    assert "42" in json.loads(result.output)["content"][0]["text"]
    with pytest.raises(Exception, match=r"at `\$\.a`"):
        everything.validate("mcp.everything.get-sum", {"a": "x", "b": 1})


def test_its_image_is_a_typed_reference(everything: ToolCatalog) -> None:
    result = call(everything, "mcp.everything.get-tiny-image", {})
    images = [b for b in json.loads(result.output)["content"] if b["type"] == "image"]
    assert images and images[0]["mime_type"] == "image/png" and images[0]["bytes"] > 0
    assert "data" not in images[0]


def test_it_sees_none_of_the_nodes_environment(everything: ToolCatalog) -> None:
    result = call(everything, "mcp.everything.get-env", {})
    assert result.ok, result.error
    assert CANARY not in result.output and "REEL_TEST_CANARY" not in result.output
    assert "PATH" in result.output  # the tool did report an environment
