"""A real stdio MCP server (the SDK's MCPServer) that echoes its environment back, for the
tests of vault handles in ``[mcp.servers.NAME] env``; run inside the sandbox.

Tools: ``env`` (the value of one variable, as is), ``env_digest`` (its SHA-256, so a test can
tell which value the server got while the value itself is redacted from every result), and
``env_fail`` (an ``isError`` result whose message is the value), and ``env_print`` (the value
written straight to stdout as a line of its own, outside the JSON-RPC framing).
"""

from __future__ import annotations

import hashlib
import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("env")


@server.tool()
def env(name: str) -> str:
    """The value of the environment variable NAME (empty when unset)."""
    return os.environ.get(name, "")


@server.tool()
def env_digest(name: str) -> str:
    """The SHA-256 of the variable's value, hex."""
    return hashlib.sha256(os.environ.get(name, "").encode()).hexdigest()


@server.tool()
def env_fail(name: str) -> str:
    """Fail with the variable's value as the error message."""
    raise ValueError(os.environ.get(name, ""))


@server.tool()
def env_print(name: str) -> str:
    """Write the variable's value to stdout as a bare line, then answer ``printed``."""
    sys.stdout.buffer.write(os.environ.get(name, "").encode() + b"\n")
    sys.stdout.buffer.flush()
    return "printed"


if __name__ == "__main__":
    server.run("stdio")
