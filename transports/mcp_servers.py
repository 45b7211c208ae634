"""The node's side of MCP servers: their tool lists on the journal, their state for the API.

`tools.mcp` knows nothing of events; this module records each tool list a server announces as
``mcp.tools_listed`` on the stream ``mcp/<server>`` (by ``system``: a server's announcement is
the node's observation, not a principal's action), lists the servers for ``GET /v1/mcp``, and
lends the vault to the servers' ``env`` handles (:class:`NodeSecrets`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from events.catalog import McpSecretsDecided, McpToolsListed
from tools.catalog import ToolCatalog
from tools.handles import Secrets
from tools.result import ToolFault
from tools.spec import ToolSpec

if TYPE_CHECKING:
    from actors.vault.store import Vault
    from events.port import JournalPort
    from policies import PolicyEngine
    from tools.mcp.runtime import McpRuntime
    from tools.mcp.server import AnnouncedTool

__all__ = [
    "McpServerRow",
    "McpServers",
    "McpToolRow",
    "NodeSecrets",
    "journal_tool_lists",
    "mcp_runtime",
    "server_rows",
]

log = logging.getLogger(__name__)


def mcp_runtime(catalog: ToolCatalog) -> McpRuntime | None:
    """The catalog's MCP runtime, or None (no server configured, or the extra missing)."""
    from tools.mcp.runtime import McpRuntime

    for runtime in catalog.runtimes:
        if isinstance(runtime, McpRuntime):
            return runtime
    return None


def journal_tool_lists(
    catalog: ToolCatalog, journal: JournalPort, allowed: dict[str, set[str]]
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
        names = sorted(digests)
        event = McpToolsListed(
            server=server,
            tools=tuple(names),
            schema_sha256=tuple(digests[n] for n in names),
            allowed=tuple(n for n in names if n in allowed.get(server, set())),
            added=tuple(sorted(set(digests) - set(before))),
            removed=tuple(sorted(set(before) - set(digests))),
            changed=tuple(sorted(n for n in digests if n in before and before[n] != digests[n])),
        )
        try:
            journal.append(f"mcp/{server}", [event], expected_seq=None, principal="system")
        except Exception:  # a journal that refuses is reported by the journal itself
            log.exception("could not record the tool list of MCP server %r", server)

    runtime.listen(record)


NODE_PRINCIPAL = "node"
"""Who uses a server's ``env`` secrets: the server runs for the node, from the operator's
config, not for any run's principal (no token can be named ``node``: tokens.PRINCIPAL_PATTERN)."""


class NodeSecrets:
    """The vault as MCP servers' ``env`` handles use it (``tools.mcp.runtime.ServerSecrets``).

    At each start of a server whose ``env`` names secrets, Cedar decides ``vault.use`` for each
    (principal ``node``, context tool ``mcp.<server>``; policies/vault.cedar permits it by
    default, an operator forbids it per server or secret), and the decision is recorded as
    ``mcp.secrets_decided`` on ``mcp/<server>`` before any value is read. A handle that names
    no secret is left to the lookup, which fails the start naming it."""

    def __init__(self, vault: Vault, engine: PolicyEngine, journal: JournalPort) -> None:
        self._vault = vault
        self._engine = engine
        self._journal = journal

    def use(self, server: str, names: tuple[str, ...]) -> Secrets:
        from policies import SecretRequest

        if not all(self._vault.has(name) for name in names):
            return self._vault.resolve
        tool = f"mcp.{server}"
        ids: set[str] = set()
        refused: tuple[str, str] | None = None
        for name in names:
            use = self._engine.decide_secret(
                SecretRequest(principal=NODE_PRINCIPAL, tool=tool, secret=name)
            )
            ids.update(use.policy_ids)
            if not use.allowed:
                refused = (name, use.reason)
                break
        event = McpSecretsDecided(
            server=server,
            secrets=names,
            outcome="deny" if refused else "allow",
            # the name after the reason: "'api_key': forbidden" reads as a key and its value
            reason=f"vault.use of {refused[0]!r} refused ({refused[1]})"
            if refused
            else "permitted",
            policy_ids=tuple(sorted(ids)),
        )
        self._journal.append(f"mcp/{server}", [event], expected_seq=None, principal=NODE_PRINCIPAL)
        if refused is not None:
            raise ToolFault(
                "denied", f"env: vault.use of secret {refused[0]!r} by the node: {refused[1]}"
            )
        return self._vault.resolve

    def scrub(self, text: str) -> str:
        return self._vault.terms().scrub(text)[0]


class McpToolRow(msgspec.Struct, frozen=True, kw_only=True):
    """One tool of a server: announced by it, named in config, or both."""

    tool: str
    """The catalog name, ``mcp.SERVER.TOOL``."""
    name: str
    """The name the server announces."""
    allowed: bool
    """Named in ``[mcp.servers.SERVER.tools]``: in the catalog."""
    announced: bool
    """In the server's last tool list."""
    posture: str
    """The node's posture for it (``disabled`` when not allowed or unavailable)."""
    read_only_hint: bool | None
    """The server's own claim (never trusted)."""
    unavailable: str | None
    """Why it cannot be called, or null."""


class McpServerRow(msgspec.Struct, frozen=True, kw_only=True):
    """One configured server."""

    name: str
    transport: str
    """``stdio`` or ``http``."""
    state: str
    """``idle``, ``starting``, ``running``, ``failed`` or ``stopped``."""
    reason: str | None
    """Why it failed or stopped, or null."""
    protocol_version: str | None
    starts: int
    """How many times the node has started it."""
    tools: list[McpToolRow]


class McpServers(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/mcp/servers``."""

    items: list[McpServerRow]


def server_rows(catalog: ToolCatalog, posture: Callable[[ToolSpec], str]) -> McpServers:
    """Each configured server with its state and every tool it announced or config names."""
    runtime = mcp_runtime(catalog)
    if runtime is None:
        return McpServers(items=[])
    specs = {s.name: s for s in catalog.specs() if s.runtime == "mcp"}
    rows: list[McpServerRow] = []
    for state in runtime.states():
        prefix = f"mcp.{state.name}."
        announced = {t.name: t for t in state.tools or ()}
        configured = {n.removeprefix(prefix) for n in specs if n.startswith(prefix)}
        tools = []
        for name in sorted({*announced, *configured}):
            spec = specs.get(prefix + name)
            tool = announced.get(name)
            tools.append(
                McpToolRow(
                    tool=prefix + name,
                    name=name,
                    allowed=spec is not None,
                    announced=tool is not None,
                    posture=posture(spec) if spec is not None else "disabled",
                    read_only_hint=tool.read_only_hint if tool is not None else None,
                    unavailable="not allowed in config" if spec is None else spec.unavailable,
                )
            )
        rows.append(
            McpServerRow(
                name=state.name,
                transport=state.transport,
                state=state.state,
                reason=state.reason,
                protocol_version=state.protocol_version,
                starts=state.starts,
                tools=tools,
            )
        )
    return McpServers(items=rows)


def _digest(schema: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(schema, order="sorted")).hexdigest()
