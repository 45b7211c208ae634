"""The node's side of MCP servers: their tool lists on the journal, their state for the API.

`tools.mcp` knows nothing of events; this module records each tool list a server announces as
``mcp.tools_listed`` on the stream ``mcp/<server>`` (by ``system``: a server's announcement is
the node's observation, not a principal's action) and lists the servers for ``GET /v1/mcp``.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

import msgspec

from events.catalog import McpToolEntry, McpToolsListed
from tools.catalog import ToolCatalog

if TYPE_CHECKING:
    from events import Journal
    from tools.mcp.runtime import McpRuntime
    from tools.mcp.server import AnnouncedTool

__all__ = ["journal_tool_lists", "mcp_runtime", "server_rows"]

log = logging.getLogger(__name__)


def mcp_runtime(catalog: ToolCatalog) -> McpRuntime | None:
    """The catalog's MCP runtime, or None (no server configured, or the extra missing)."""
    for runtime in catalog.runtimes:
        if type(runtime).__name__ == "McpRuntime":
            return runtime  # type: ignore[return-value]
    return None


def journal_tool_lists(
    catalog: ToolCatalog, journal: Journal, allowed: dict[str, set[str]]
) -> None:
    """Record every tool list the catalog's MCP servers announce (those already announced at
    start first). ``allowed``: the tools config names per server."""
    runtime = mcp_runtime(catalog)
    if runtime is None:
        return
    last: dict[str, dict[str, str]] = {}

    def record(server: str, tools: tuple[AnnouncedTool, ...]) -> None:
        digests = {t.name: _digest(t.input_schema) for t in tools}
        before = last.get(server, {})
        last[server] = digests
        event = McpToolsListed(
            server=server,
            tools=tuple(
                McpToolEntry(name=n, schema_sha256=d, allowed=n in allowed.get(server, set()))
                for n, d in sorted(digests.items())
            ),
            added=tuple(sorted(set(digests) - set(before))),
            removed=tuple(sorted(set(before) - set(digests))),
            changed=tuple(sorted(n for n in digests if n in before and before[n] != digests[n])),
        )
        try:
            journal.append(f"mcp/{server}", [event], expected_seq=None, principal="system")
        except Exception:  # a journal that refuses is reported by the journal itself
            log.exception("could not record the tool list of MCP server %r", server)

    runtime.listen(record)


def server_rows(catalog: ToolCatalog, postures: dict[str, str]) -> list[dict[str, Any]]:
    """Each server: transport, state, reason, and every tool it announced with whether it is
    allowed, its posture and why it is unavailable. ``postures``: tool name -> effective."""
    runtime = mcp_runtime(catalog)
    if runtime is None:
        return []
    specs = {s.name: s for s in catalog.specs() if s.runtime == "mcp"}
    rows: list[dict[str, Any]] = []
    for state in runtime.states():
        announced = {t.name: t for t in state.tools or ()}
        names = sorted(
            {*announced, *(n.split(".", 2)[2] for n in specs if n.split(".")[1] == state.name)}
        )
        tools = []
        for name in names:
            spec = specs.get(f"mcp.{state.name}.{name}")
            tool = announced.get(name)
            tools.append(
                {
                    "name": name,
                    "tool": f"mcp.{state.name}.{name}",
                    "allowed": spec is not None,
                    "posture": postures.get(f"mcp.{state.name}.{name}", "disabled"),
                    "announced": tool is not None,
                    "read_only_hint": tool.read_only_hint if tool is not None else None,
                    "unavailable": spec.unavailable
                    if spec is not None
                    else "not allowed in config",
                }
            )
        rows.append(
            {
                "name": state.name,
                "transport": state.transport,
                "state": state.state,
                "reason": state.reason,
                "protocol_version": state.protocol_version,
                "starts": state.starts,
                "tools": tools,
            }
        )
    return rows


def _digest(schema: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(schema, order="sorted")).hexdigest()
