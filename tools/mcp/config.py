"""``[mcp.servers.NAME]``: the MCP servers whose tools join the catalog, and each tool's risk.

Plain msgspec values (no MCP SDK import), so the node's config can be decoded without the
``reel[mcp]`` extra. A server is either a stdio command (``command`` + ``args`` + ``env``, run in
the shell sandbox) or a Streamable HTTP endpoint (``url``, egress decided like ``http.fetch``).
Only the tools named under ``[mcp.servers.NAME.tools.TOOL]`` are callable: a tool the server
announces that config does not name stays disabled (listed, never offered, never run).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from tools.handles import HandleValue
from tools.spec import Posture, Risk

__all__ = ["SERVER_NAME", "TOOL_NAME", "McpConfig", "McpServerConfig", "McpToolConfig"]

SERVER_NAME = r"^[a-z][a-z0-9_]{0,31}$"
"""A server's name: one segment of the catalog name ``mcp.NAME.TOOL``."""
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"
"""The MCP spec's tool-name characters, without dots (a dot would make ``mcp.a.b.c`` ambiguous)."""

Seconds = Annotated[float, msgspec.Meta(gt=0, le=3600)]


class McpToolConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[mcp.servers.NAME.tools.TOOL]``: naming a tool here allows it."""

    risk: Risk = "high"
    posture: Posture = "ask_each_time"
    read_only: bool = False
    """The operator vouches that the tool changes nothing, so several of its calls in one turn
    run at once (docs/tools.md, "Parallel read-only calls"). The server's own ``readOnlyHint``
    is not trusted: a server may say anything about itself."""


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One server. Exactly one of ``command`` and ``url``."""

    command: str | None = None
    """The program (absolute, or a name on ``[tools] shell_path``); visible inside the sandbox."""
    args: tuple[str, ...] = ()
    env: dict[str, HandleValue] = {}
    """Extra environment for the server (the sandbox starts from an empty one). A value may name
    a vault secret, ``{vault = "NAME"}`` or text with ``${vault:NAME}`` in it: resolved only as
    the server starts, after the node's ``vault.use`` decision (docs/mcp.md, "Secrets"); config
    dumps, listings and the journal carry the handle, never the value."""
    url: str | None = None
    """A Streamable HTTP endpoint; its host must pass ``[tools] http_allowlist`` and
    ``http_allow_private`` like ``http.fetch``."""
    read_only_paths: tuple[str, ...] = ()
    """stdio only: host directories the server needs to read (its installation, say a venv),
    bound read-only at the same path; one inside the node's data dir is refused."""
    network: bool = False
    """stdio only: share the host's network with the sandbox (its tools then declare
    ``net.egress``)."""
    http_egress: bool = False
    """stdio only: no network of its own, but HTTP and HTTPS through the node's egress proxy
    (the server is started with ``HTTP_PROXY``/``HTTPS_PROXY`` set), every connection decided
    by ``[tools] http_allowlist`` and ``http_allow_private`` as for ``http.fetch``; its tools
    declare ``net.egress``. Needs ``python3`` on ``shell_path`` inside the sandbox (it runs
    the relay, tools/mcp/relay.py)."""
    start_timeout_s: Seconds = 10.0
    """How long the start (process, handshake, tool list) may take before the server's tools
    are unavailable with that reason."""
    call_timeout_s: Seconds = 30.0
    tools: dict[Annotated[str, msgspec.Meta(pattern=TOOL_NAME)], McpToolConfig] = {}

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError("set exactly one of `command` (stdio) and `url` (Streamable HTTP)")
        stdio_only = self.args or self.env or self.network or self.http_egress
        if self.url is not None and (stdio_only or self.read_only_paths):
            raise ValueError(
                "`args`, `env`, `network`, `http_egress` and `read_only_paths` are for stdio "
                "servers (`command`)"
            )
        if self.network and self.http_egress:
            raise ValueError(
                "set at most one of `network` (the host's network) and `http_egress` (HTTP "
                "through the node's allowlist)"
            )


class McpConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[mcp]``."""

    servers: dict[Annotated[str, msgspec.Meta(pattern=SERVER_NAME)], McpServerConfig] = {}
