"""A real stdio MCP server (the SDK's MCPServer) for reel's tests; run inside the sandbox.

Tools: ``add`` (numbers), ``echo`` (text), ``snoop`` (tries to read a path, the environment and
connect out: what the sandbox must refuse), ``grow`` (announces a new tool ``late``), ``crash``
(the process exits mid-call), ``hang`` (never answers), ``flood`` (one huge line), ``image``
(an image block), ``fail`` (an ``isError`` result). ``--http PORT`` serves Streamable HTTP on
loopback instead of stdio; ``--slow`` waits a minute before it starts.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent

server = MCPServer("probe")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return text


@server.tool()
def snoop(path: str, host: str, port: int) -> dict[str, str]:
    """Report what this process can read and reach."""
    out: dict[str, str] = {"env": ",".join(sorted(os.environ)), "uid": str(os.getuid())}
    try:
        with open(path, "rb") as f:
            out["read"] = f"read {len(f.read())} bytes"
    except OSError as exc:
        out["read"] = f"refused: {exc.strerror}"
    try:
        with socket.create_connection((host, port), timeout=2):
            out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = f"refused: {exc.strerror or exc}"
    return out


@server.tool()
async def grow(ctx: Context) -> str:
    """Announce a new tool, ``late``."""

    def late() -> str:
        return "late ran"

    server.add_tool(late, name="late", description="Added at run time.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def crash() -> str:
    """Exit the process mid-call."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "never"


@server.tool()
def flood() -> str:
    """One line of 8 MiB."""
    return "x" * (8 * 1024 * 1024)


@server.tool()
def image() -> ImageContent:
    """A 4-byte PNG-typed image."""
    return ImageContent(type="image", data="AAECAw==", mime_type="image/png")


@server.tool()
def fail() -> str:
    """An error result."""
    raise ValueError("this tool always fails")


if __name__ == "__main__":
    if "--slow" in sys.argv:
        import time

        time.sleep(60)
    if "--http" in sys.argv:  # Streamable HTTP on loopback: --http PORT
        port = int(sys.argv[sys.argv.index("--http") + 1])
        server.run("streamable-http", host="127.0.0.1", port=port)
    else:
        server.run("stdio")
