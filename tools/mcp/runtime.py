"""`McpRuntime`: the tools of the configured MCP servers, as ``mcp.SERVER.TOOL``.

Building the runtime starts every server (in parallel, each bounded by its ``start_timeout_s``)
to read its tool list, because the catalog, and the tools the model is offered, are fixed
when the node starts. A server that cannot start (missing program, slow, a protocol version
the SDK does not speak, no sandbox) does not stop the node: its configured tools are listed
unavailable with the reason. The spec of a tool is built from the list read then: a tool the
server adds later, or whose schema it changes, is never called under the schema the operator
allowed (a call checks the current list; a changed or vanished tool is refused).

Results: text blocks as text, ``structuredContent`` as JSON, images, audio and resources as
typed references (type, MIME type, URI, size and SHA-256 of the bytes; never the bytes), all in
one JSON object fitted to the tool's output cap. ``isError`` results and protocol errors are
tool errors naming the server.

Secrets: a stdio server's ``env`` may name vault secrets by handle. They are resolved in the
starter, each time the server starts, through the node's :class:`ServerSecrets` (which decides
``vault.use`` for the node and records it): a rotation is picked up at the server's next start.
A refusal, or a handle that names no secret, fails the start with the reason naming the handle
(its tools unavailable). Reasons this runtime reports (states, unavailable tools) pass through
``ServerSecrets.scrub``, like every tool result does in the tool actor.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.egress import EgressPolicy
from tools.handles import Secrets, names_of, resolve_all
from tools.mcp.arguments import arguments_type, schema_validator
from tools.mcp.config import McpConfig, McpServerConfig
from tools.mcp.egress_proxy import EgressProxy, guest_socket, relayed
from tools.mcp.server import AnnouncedTool, McpLoop, McpServer, ServerState
from tools.result import Output, ToolFault, fit_json
from tools.runtime import ToolRuntime
from tools.sandbox import GUEST_WORKSPACE, Launch, Sandbox, probe
from tools.sandbox_user import adopt, sandbox_user
from tools.spec import Capability, ToolSpec

__all__ = ["PREFIX", "McpRuntime", "ServerSecrets", "ToolsListener"]

PREFIX = "mcp."
ToolsListener = Callable[[str, tuple[AnnouncedTool, ...]], None]
"""Told each tool list a server announces that differs from its last (the node journals it)."""


class ServerSecrets(Protocol):
    """The node's vault as servers' ``env`` handles use it (transports/mcp_servers.py)."""

    def use(self, server: str, names: tuple[str, ...]) -> Secrets:
        """The lookup for ``names`` in ``server``'s env, once the node may use them (decided
        and recorded); raises ToolFault ``denied`` naming the secret when it may not."""
        ...

    def scrub(self, text: str) -> str:
        """``text`` with every value of the vault replaced."""
        ...


class McpRuntime(ToolRuntime):
    """Every configured server's allowed tools."""

    def __init__(
        self,
        config: ToolsConfig,
        mcp: McpConfig,
        state_dir: Path,
        secrets: ServerSecrets | None = None,
    ) -> None:
        self._config = config
        self._secrets = secrets
        self._mcp = mcp
        self._state_dir = state_dir
        self._loop = McpLoop()
        self._listeners: list[ToolsListener] = []
        self._pending: list[tuple[str, tuple[AnnouncedTool, ...]]] = []
        self._egress = EgressPolicy(config.http_allowlist, config.http_allow_private)
        self.servers: dict[str, McpServer] = {
            name: McpServer(
                name,
                "stdio" if server.command is not None else "http",
                self._starter(name, server),
                self._loop,
                self._announced,
            )
            for name, server in sorted(mcp.servers.items())
        }
        self._specs, self._allowed = self._discover()

    def listen(self, listener: ToolsListener) -> None:
        """Add a listener; it is first told every list announced before it was added."""
        self._listeners.append(listener)
        for name, tools in self._pending:
            listener(name, tools)

    def states(self) -> list[ServerState]:
        return [self._state(server) for server in self.servers.values()]

    def _state(self, server: McpServer) -> ServerState:
        """The server's state, its reason scrubbed of the vault's values (a server may echo
        what it was given into the error its start failed with)."""
        state = server.state()
        if state.reason is None or self._secrets is None:
            return state
        return msgspec.structs.replace(state, reason=self._secrets.scrub(state.reason))

    def test(self, name: str, timeout_s: float) -> ServerState:
        """Start ``name`` if it is not running (a failed one at once, without its backoff) and
        read its tool list again; its state after. Raises KeyError for an unknown name."""
        server = self.servers[name]
        ctx = ExecutionContext.start(Path("/"), timeout_s)
        with contextlib.suppress(ToolFault):
            server.probe(ctx)
        return self._state(server)

    def close(self) -> None:
        """Stop every server (the node is draining)."""
        for server in self.servers.values():
            server.close()
        self._loop.close()

    def specs(self) -> Sequence[ToolSpec]:
        return self._specs

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        server_name, _, tool = name.removeprefix(PREFIX).partition(".")
        server = self.servers[server_name]
        allowed = self._allowed.get(name)
        if allowed is None:
            raise ToolFault("denied", f"{name} is unavailable on this node")
        server.connect(ctx)
        current = {t.name: t for t in server.state().tools or ()}
        now = current.get(tool)
        if now is None:
            raise ToolFault("denied", f"MCP server {server_name!r} no longer announces {tool!r}")
        if now.input_schema != allowed.input_schema:
            raise ToolFault(
                "denied",
                f"MCP server {server_name!r} changed the schema of {tool!r} since the node "
                "started; restart the node to review it",
            )
        arguments = msgspec.to_builtins(args)
        result = server.call(tool, arguments, ctx)
        return _output(server_name, result, ctx.output_cap(self._config.default_output_cap_bytes))

    def _announced(self, name: str, tools: tuple[AnnouncedTool, ...]) -> None:
        self._pending.append((name, tools))
        for listener in self._listeners:
            listener(name, tools)

    def _discover(self) -> tuple[tuple[ToolSpec, ...], dict[str, AnnouncedTool]]:
        """Start every server at once; specs for the configured tools of each."""
        with concurrent.futures.ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            for name, server in self.servers.items():
                timeout = self._mcp.servers[name].start_timeout_s
                pool.submit(_try_connect, server, timeout)
        specs: list[ToolSpec] = []
        allowed: dict[str, AnnouncedTool] = {}
        for name, server in self.servers.items():
            cfg = self._mcp.servers[name]
            state = self._state(server)
            announced = {t.name: t for t in state.tools or ()}
            for tool, tool_cfg in sorted(cfg.tools.items()):
                full = f"{PREFIX}{name}.{tool}"
                found = announced.get(tool)
                why: str | None = None
                if state.tools is None:
                    why = f"MCP server {name!r}: {state.reason or 'not started'}"
                elif found is None:
                    why = f"MCP server {name!r} does not announce {tool!r}"
                checker = None
                if found is not None:
                    try:
                        checker = schema_validator(found.input_schema)
                    except ValueError as exc:
                        why = f"MCP server {name!r}, {tool!r}: {exc}"
                caps: set[Capability] = {"process.exec"} if cfg.command else set()
                if cfg.network or cfg.http_egress or cfg.url:
                    caps.add("net.egress")
                schema = found.input_schema if found is not None else {"type": "object"}
                specs.append(
                    ToolSpec(
                        name=full,
                        description=(found.description if found else "") or f"{tool} ({name})",
                        args_type=arguments_type("Args_" + full.replace(".", "_"), schema),
                        capabilities=frozenset(caps),
                        risk=tool_cfg.risk,
                        default_posture="disabled" if why else tool_cfg.posture,
                        timeout_s=cfg.call_timeout_s,
                        output_cap_bytes=self._config.default_output_cap_bytes,
                        runtime="mcp",
                        unavailable=why,
                        parameters=schema,
                        validator=checker,
                        read_only=tool_cfg.read_only,
                    )
                )
                if why is None and found is not None:
                    allowed[full] = found
        return tuple(specs), allowed

    def _starter(self, name: str, server: McpServerConfig) -> Callable[[asyncio.Event], Any]:
        if server.url is not None:
            return self._http_starter(server.url)
        return self._stdio_starter(name, server)

    def _http_starter(self, url: str) -> Callable[[asyncio.Event], Any]:
        @contextlib.asynccontextmanager
        async def start(_closed: asyncio.Event) -> AsyncIterator[Any]:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ToolFault("invalid", f"url: {url!r} is not an http(s) URL")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._egress.vetted, parts.hostname, port)
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            # Checked above for a start's clear reason; then every connection goes through the
            # egress proxy, which decides it again and connects to the address it checked.
            proxy = EgressProxy(self._egress)
            try:
                through = f"http://127.0.0.1:{await proxy.listen_loopback()}"
                client = httpx2.AsyncClient(
                    proxy=through,
                    trust_env=False,
                    timeout=httpx2.Timeout(30.0, read=300.0),  # the SDK's own defaults
                    limits=httpx2.Limits(max_keepalive_connections=0),  # one request each
                )
                async with client, streamable_http_client(url, http_client=client) as streams:
                    yield streams
            finally:
                await proxy.close()

        return start

    def _stdio_starter(self, name: str, server: McpServerConfig) -> Callable[[asyncio.Event], Any]:
        cfg = self._config
        own = self._state_dir / name

        @contextlib.asynccontextmanager
        async def start(closed: asyncio.Event) -> AsyncIterator[Any]:
            from tools.mcp.transport import sandboxed_stdio

            sandbox = self._sandbox(server)
            program = shutil.which(server.command or "", path=cfg.shell_path)
            if program is None or not sandbox.visible(program):
                raise ToolFault(
                    "invalid",
                    f"command: {server.command!r} is not found on shell_path or not visible "
                    "in the sandbox",
                )
            command = [program, *server.args]
            if server.http_egress:
                command = [*relayed(sandbox, cfg.shell_path), guest_socket(), *command]
            own.mkdir(mode=0o700, parents=True, exist_ok=True)
            root = os.open(own, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            proxy = EgressProxy(self._egress) if server.http_egress else None
            try:
                if proxy is not None:
                    await proxy.start(root)
                if sandbox.user is not None:
                    adopt(root, sandbox.user)
                env = {"PATH": cfg.shell_path, "LANG": "C.UTF-8", "HOME": GUEST_WORKSPACE}
                env.update(self._env(name, server))
                launch = Launch.prepare(
                    sandbox,
                    workspace_fd=root,
                    cwd=GUEST_WORKSPACE,
                    env=env,
                    command=command,
                    max_processes=cfg.shell_max_processes,
                    hidden=(os.path.realpath(own),),
                )
                cap = max(cfg.default_output_cap_bytes * 4, 1024 * 1024)
                async with sandboxed_stdio(launch, sandbox.bwrap, cap, closed) as streams:
                    yield streams
            finally:
                if proxy is not None:
                    await proxy.close()
                os.close(root)

        return start

    def _env(self, name: str, server: McpServerConfig) -> dict[str, str]:
        """``server.env`` with its vault handles resolved (the node decides ``vault.use`` at
        every start, so a rotated value reaches the next start); raises ToolFault naming the
        handle when one names no secret or may not be used."""
        names = tuple(sorted(set(names_of(server.env.values()))))
        if not names:
            return resolve_all(server.env, None, "env")
        if self._secrets is None:  # an offline catalog (`reel tools`): no vault, no decision
            raise ToolFault(
                "failed",
                f"env names vault secrets ({', '.join(names)}): only the node resolves them",
            )
        return resolve_all(server.env, self._secrets.use(name, names), "env")

    def _sandbox(self, server: McpServerConfig) -> Sandbox:
        cfg = self._config
        hidden = [*cfg.shell_hidden_paths, str(self._state_dir)]
        if cfg.workspace_dir is not None:
            hidden.append(os.path.realpath(cfg.workspace_dir))
        found = probe(
            cfg.shell_bwrap,
            search_path=cfg.shell_path,
            network=server.network,
            tmp_bytes=cfg.shell_tmp_bytes,
            hidden=hidden,
            user=sandbox_user(cfg.shell_uid, cfg.shell_gid),
        )
        if isinstance(found, str):
            raise ToolFault("failed", f"no sandbox: {found}")
        for path in server.read_only_paths:
            real = os.path.realpath(path)
            if real == "/tmp" or real.startswith("/tmp/"):
                raise ToolFault(
                    "invalid",
                    f"read_only_paths: {path!r} lies under /tmp, which the sandbox replaces "
                    "with a private one",
                )
        found = dataclasses.replace(found, path_dirs=(*found.path_dirs, *server.read_only_paths))
        conflict = found.conflicts()
        if conflict is not None:
            raise ToolFault("failed", conflict)
        return found


def _try_connect(server: McpServer, timeout_s: float) -> None:
    with contextlib.suppress(ToolFault):
        server.connect(ExecutionContext.start(Path("/"), timeout_s))


def _output(server: str, result: Any, cap: int) -> Output:
    """The call's result as one JSON object, or a ToolFault when the server says it failed."""
    blocks: list[dict[str, Any]] = []
    texts: list[str] = []
    for block in result.content:
        kind = block.type
        if kind == "text":
            texts.append(block.text)
            blocks.append({"type": "text", "text": block.text})
        elif kind in ("image", "audio"):
            blocks.append({"type": kind, "mime_type": block.mime_type, **_digest(block.data)})
        elif kind == "resource_link":
            blocks.append({"type": kind, "uri": str(block.uri), "mime_type": block.mime_type})
        elif kind == "resource":
            res = block.resource
            ref: dict[str, Any] = {"type": kind, "uri": str(res.uri), "mime_type": res.mime_type}
            if hasattr(res, "text"):
                ref["text"] = res.text
            else:
                ref.update(_digest(res.blob))
            blocks.append(ref)
    body: dict[str, Any] = {"content": blocks}
    if result.structured_content is not None:
        body["structured"] = result.structured_content
    if result.is_error:
        message = " ".join(texts).strip()[:500] or "the tool reported an error"
        raise ToolFault("failed", f"MCP server {server!r}: {message}")
    text = fit_json(body, (), cap, lambda _b, _f: None)
    if text is None:
        text = fit_json({"text": "\n".join(texts), "truncated": True}, ("text",), cap, _mark)
        if text is None:
            raise ToolFault("limit", f"the result exceeds the output cap of {cap} bytes")
        return Output(text=text, truncated=True)
    return Output(text=text)


def _mark(body: dict[str, Any], _field: str) -> None:
    body["truncated"] = True


def _digest(data: str) -> dict[str, Any]:
    """A typed reference to base64 bytes: their size and SHA-256, never the bytes."""
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return {"bytes": None, "sha256": None, "note": "not valid base64"}
    return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
