"""MCP servers as governed tools (``[mcp.servers.NAME]``; docs/mcp.md).

`config` is plain msgspec and imports nothing of the MCP SDK; `runtime` (the ``reel[mcp]``
extra) runs each server's tools as ``mcp.SERVER.TOOL`` in the catalog.
"""

from tools.mcp.config import McpConfig, McpServerConfig, McpToolConfig

__all__ = ["McpConfig", "McpServerConfig", "McpToolConfig"]
