"""`build_catalog`: the composition of every runtime from one `ToolsConfig`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tools.builtins import BuiltinRuntime
from tools.catalog import ToolCatalog
from tools.checkpoints import BlobStore, Checkpointer
from tools.config import ToolsConfig
from tools.errors import ManifestError
from tools.files import FileRuntime
from tools.http_fetch import HttpRuntime
from tools.mcp.config import McpConfig
from tools.memory_tools import MemoryStore, MemoryToolsRuntime
from tools.plugins import load_plugins
from tools.runtime import ToolRuntime
from tools.shell import ShellRuntime

if TYPE_CHECKING:
    from tools.mcp.runtime import ServerSecrets

__all__ = ["build_catalog"]


def build_catalog(
    config: ToolsConfig,
    memory: MemoryStore | None = None,
    checkpoint_dir: Path | None = None,
    mcp: McpConfig | None = None,
    mcp_state_dir: Path | None = None,
    mcp_secrets: ServerSecrets | None = None,
) -> ToolCatalog:
    """Builtins, the memory tools, workspace files, http.fetch, shell.run, the plugins in
    ``plugin_dir``, and the tools of the MCP servers in ``mcp`` (each server started, with
    ``mcp_state_dir/NAME`` its writable directory, ``mcp_secrets`` the node's vault for the
    handles in their ``env``). ``memory`` is the node's memory (the
    memory tools are listed without it, so every catalog declares the same tools, but their
    calls then fail).

    ``checkpoint_dir``: where workspace checkpoints keep their blobs (the node's
    ``<data>/checkpoints``); None: writing calls are not checkpointed.

    Raises a `PluginError` naming the plugin when one cannot be loaded, or
    whose name clashes with a built-in tool.
    """
    checkpoints = None
    if checkpoint_dir is not None:
        checkpoints = Checkpointer(
            store=BlobStore(checkpoint_dir, config.checkpoint_blob_max_bytes),
            scan_max_files=config.checkpoint_scan_max_files,
            file_max_bytes=config.checkpoint_file_max_bytes,
        )
    runtimes: list[ToolRuntime] = [
        BuiltinRuntime(config),
        MemoryToolsRuntime(config, memory),
        FileRuntime(config, checkpoints),
        HttpRuntime(config),
        ShellRuntime(config),
    ]
    if config.plugin_dir is not None:
        plugins = load_plugins(Path(config.plugin_dir), config)
        taken = {spec.name for runtime in runtimes for spec in runtime.specs()}
        for spec in plugins.specs():
            if spec.name in taken:
                raise ManifestError(f"plugin {spec.name!r}: name clashes with a built-in tool")
        runtimes.append(plugins)
    if mcp is not None and mcp.servers:
        from tools.mcp.runtime import McpRuntime

        assert mcp_state_dir is not None, "MCP servers need a state dir"
        runtimes.append(McpRuntime(config, mcp, mcp_state_dir, mcp_secrets))
    return ToolCatalog(runtimes, checkpoints)
