"""``reel mcp list | tools | test NAME``: the node's MCP servers (docs/mcp.md).

Clients of the running node's HTTP API (``GET /v1/mcp/servers``, ``POST
/v1/mcp/servers/{server}/test``): the servers live in the node. ``list`` and ``tools`` on a data
dir no node holds show what config.toml declares, without starting anything; ``test`` needs the
node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from transports.cli.errors import EXIT_NEGATIVE, CliError
from transports.cli.node_api import api, online
from transports.cli.options import DataOption, JsonOption, TokenFileOption

app = typer.Typer(help="MCP servers: their state, their tools, a test.", no_args_is_help=True)
_json = msgspec.json.Encoder()


@app.command("list")
def list_cmd(
    data: DataOption = None, json: JsonOption = False, token_file: TokenFileOption = None
) -> None:
    """Each server: transport, state (idle, starting, running, failed, stopped), why it failed,
    how many times it started, and how many of its tools are allowed."""
    items = _servers(data, token_file)
    if json:
        print(_json.encode(items).decode())
        return
    if not items:
        print("no MCP servers configured ([mcp.servers.<name>] in config.toml)")
        return
    for item in items:
        allowed = sum(1 for t in item["tools"] if t["allowed"])
        line = (
            f"{item['name']}  {item['transport']}  {item['state']}  starts={item['starts']}  "
            f"tools={allowed}/{len(item['tools'])} allowed"
        )
        if item["reason"]:
            line += f"  reason: {item['reason']}"
        print(line)


@app.command("tools")
def tools_cmd(
    server: Annotated[str | None, typer.Argument(help="Only this server's tools.")] = None,
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Every tool each server announced or config names: its catalog name, whether config
    allows it, its posture, and why it cannot be called."""
    items = _servers(data, token_file)
    if server is not None:
        items = [i for i in items if i["name"] == server]
        if not items:
            raise CliError(f"SERVER: no MCP server {server!r} is configured")
    rows = [tool for item in items for tool in item["tools"]]
    if json:
        print(_json.encode(rows).decode())
        return
    for row in rows:
        line = (
            f"{row['tool']}  {'allowed' if row['allowed'] else 'not-allowed'}  "
            f"posture={row['posture']}"
        )
        if row["unavailable"]:
            line += f"  unavailable: {row['unavailable']}"
        print(line)


@app.command("test")
def test_cmd(
    server: Annotated[str, typer.Argument(help="The server's name ([mcp.servers.<name>]).")],
    data: DataOption = None,
    json: JsonOption = False,
    token_file: TokenFileOption = None,
) -> None:
    """Start the server if it is not running (a failed one at once), read its tool
    list; exit 1 when it is not running after."""
    node = online(data)
    if node is None:
        raise CliError("no node holds the data dir: `reel mcp test` asks the running node")
    item = api(node, token_file, "POST", f"/v1/mcp/servers/{server}/test", {}, 200)
    if json:
        print(_json.encode(item).decode())
    else:
        reason = f"  reason: {item['reason']}" if item["reason"] else ""
        print(f"{item['name']}  {item['state']}  tools={len(item['tools'])}{reason}")
    if item["state"] != "running":
        raise typer.Exit(EXIT_NEGATIVE)


def _servers(data: Path | None, token_file: Path | None) -> list[dict[str, Any]]:
    node = online(data)
    if node is not None:
        items: list[dict[str, Any]] = api(node, token_file, "GET", "/v1/mcp/servers", None, 200)[
            "items"
        ]
        return items
    return _configured(data)


def _configured(data: Path | None) -> list[dict[str, Any]]:
    """What config.toml declares when no node runs (nothing is started here)."""
    from transports.cli.data_dir import existing
    from transports.config import load_config

    config = load_config(existing(data) / "config.toml")
    return [
        {
            "name": name,
            "transport": "stdio" if server.command is not None else "http",
            "state": "idle",
            "reason": "no node is running",
            "protocol_version": None,
            "starts": 0,
            "tools": [
                {
                    "tool": f"mcp.{name}.{tool}",
                    "name": tool,
                    "allowed": True,
                    "announced": False,
                    "posture": cfg.posture,
                    "read_only_hint": None,
                    "unavailable": "no node is running",
                }
                for tool, cfg in sorted(server.tools.items())
            ],
        }
        for name, server in sorted(config.mcp.servers.items())
    ]
