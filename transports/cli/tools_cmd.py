"""``reel tools``: the tool catalog as the node would build it from the data dir."""

from __future__ import annotations

import msgspec
import typer

from transports.cli.data_dir import resolve
from transports.cli.options import DataOption, JsonOption


def tools(data: DataOption = None, json: JsonOption = False) -> None:
    """List tools: risk, capabilities, effective posture, time-out, and why a tool cannot run
    on this node (e.g. shell.run without a working bubblewrap sandbox)."""
    from actors import ToolGate
    from policies import PolicyEngine
    from tools import build_catalog
    from transports.config import load_config

    data_dir = resolve(data)
    config = load_config(data_dir / "config.toml")
    # MCP servers are started to read their tool lists (and stopped): docs/mcp.md.
    catalog = build_catalog(
        config.tools_config(data_dir), mcp=config.mcp, mcp_state_dir=data_dir / "mcp"
    )
    catalog.close()
    gate = ToolGate(PolicyEngine.load(None), config.tools.postures)
    rows = [
        {
            "name": spec.name,
            "risk": spec.risk,
            "capabilities": sorted(spec.capabilities),
            "posture": gate.posture(spec),
            "timeout_s": spec.timeout_s,
            "description": spec.description,
            "parameters": spec.json_schema(),
            "unavailable": spec.unavailable,
        }
        for spec in catalog.specs()
    ]
    if json:
        print(msgspec.json.encode(rows).decode())
        raise typer.Exit(0)
    for row in rows:
        caps = ",".join(row["capabilities"]) or "-"  # type: ignore[arg-type]
        line = f"{row['name']:<14} risk={row['risk']:<9} posture={row['posture']:<14} caps={caps}"
        if row["unavailable"]:
            line += f"  unavailable: {row['unavailable']}"
        print(line)
