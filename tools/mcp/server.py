"""`McpServer`: one configured server's connection, started lazily, restarted with backoff.

Every server of a runtime shares one asyncio loop on a daemon thread (`McpLoop`); the tool
actor's thread blocks on a future while it looks at the call's cancel event and deadline, like
every runtime (``tools.runtime``). A connection lives in one task (the SDK's ``Client`` is an
async context manager that must be left by the task that entered it) until `McpServer.close`,
or until a call finds the connection broken (the server crashed, hung past the deadline, or
flooded its output): the connection is then torn down and the next call starts a new one,
no sooner than the backoff after a failed start allows (1 s, doubling, at most 60 s).

The tool list is read at every start and whenever the server says it changed
(``notifications/tools/list_changed``); each different list goes to ``on_tools``, which the
node records on the journal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal, TypeVar

import msgspec

from tools.context import ExecutionContext
from tools.result import ToolFault
from tools.runtime import POLL_S

__all__ = ["AnnouncedTool", "McpLoop", "McpServer", "ServerState", "StartFn"]

T = TypeVar("T")
State = Literal["idle", "starting", "running", "failed", "stopped"]
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 60.0


class AnnouncedTool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only_hint: bool | None = None
    """The server's own ``readOnlyHint`` annotation: a claim, shown, never trusted."""


class ServerState(msgspec.Struct, frozen=True, kw_only=True):
    """What ``reel mcp list`` shows of a server."""

    name: str
    transport: Literal["stdio", "http"]
    state: State
    reason: str | None = None
    """Why the server is ``failed`` (its start's error), or None."""
    protocol_version: str | None = None
    starts: int = 0
    tools: tuple[AnnouncedTool, ...] | None = None
    """The last list the server announced; None before its first start."""


StartFn = Callable[[asyncio.Event], AbstractAsyncContextManager[Any]]
"""Opens the transport (the SDK's ``Transport``: its streams), setting the event when the
server's output ends; raises ToolFault when it cannot start (no sandbox, egress refused)."""


class McpLoop:
    """An asyncio loop on a daemon thread, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="mcp-loop", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def close(self) -> None:
        """Stop the loop (after the servers' `McpServer.close`) and wait for its thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is not None and thread is not None:
            with contextlib.suppress(Exception):  # each task's end kills its server's sandbox
                asyncio.run_coroutine_threadsafe(_drain(), loop).result(_DRAIN_S + 1.0)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10.0)
            if not thread.is_alive():
                loop.close()


_DRAIN_S = 10.0


async def _drain() -> None:
    """Wait (bounded) for every other task of the loop to end, then cancel what is left."""
    tasks = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=_DRAIN_S)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=_DRAIN_S)


def wait_for(
    future: concurrent.futures.Future[T], ctx: ExecutionContext, what: str, *, own: bool = True
) -> T:
    """The future's result, or a `ToolFault` when ``ctx`` is cancelled or out of time (the
    future is then cancelled if the caller ``own``s it; a start other calls wait for too
    goes on)."""
    while True:
        if ctx.cancelled():
            if own:
                future.cancel()
            raise ToolFault("cancelled", "cancelled by request")
        remaining = ctx.remaining()
        if remaining <= 0:
            if own:
                future.cancel()
            raise ToolFault("timeout", f"deadline exceeded ({what})")
        try:
            return future.result(timeout=min(POLL_S, remaining))
        except concurrent.futures.TimeoutError:
            continue


class McpServer:
    """One server's connection and its last-announced tools."""

    def __init__(
        self,
        name: str,
        transport: Literal["stdio", "http"],
        start: StartFn,
        loop: McpLoop,
        on_tools: Callable[[str, tuple[AnnouncedTool, ...]], None],
    ) -> None:
        self.name = name
        self._transport = transport
        self._start = start
        self._loop = loop
        self._on_tools = on_tools
        self._lock = threading.Lock()
        self._state: State = "idle"
        self._reason: str | None = None
        self._starts = 0
        self._failures = 0
        self._retry_at = 0.0
        self._tools: tuple[AnnouncedTool, ...] | None = None
        self._version: str | None = None
        self._client: Any = None
        self._ready: concurrent.futures.Future[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed: asyncio.Event | None = None
        """Set to end the running connection gracefully (its transport then kills the server
        unhurried, which a cancelled task cannot be relied on to do)."""

    def state(self) -> ServerState:
        with self._lock:
            return ServerState(
                name=self.name,
                transport=self._transport,
                state=self._state,
                reason=self._reason,
                protocol_version=self._version,
                starts=self._starts,
                tools=self._tools,
            )

    def connect(self, ctx: ExecutionContext) -> Any:
        """The live SDK ``Client``, starting the server if it is not running (raises ToolFault:
        ``failed`` with the reason when it cannot start, or is waiting out its backoff)."""
        with self._lock:
            if self._state == "running" and self._client is not None:
                return self._client
            if self._state == "stopped" and self._reason == "closed":
                raise ToolFault("failed", f"MCP server {self.name!r} is stopped (node draining)")
            if self._ready is None:
                wait_s = self._retry_at - time.monotonic()
                if self._state == "failed" and wait_s > 0:
                    raise ToolFault(
                        "failed",
                        f"MCP server {self.name!r} failed to start ({self._reason}); "
                        f"next attempt in {wait_s:.1f} s",
                    )
                self._state, self._starts = "starting", self._starts + 1
                self._ready = self._loop.submit(self._session())
            ready = self._ready
        try:
            return wait_for(ready, ctx, f"starting MCP server {self.name!r}", own=False)
        except ToolFault as fault:
            if fault.kind == "timeout":
                self._failed("did not start in time")
            raise
        except Exception as exc:
            raise ToolFault("failed", f"MCP server {self.name!r} failed to start: {exc}") from None

    def probe(self, ctx: ExecutionContext) -> None:
        """Start the server now (a failed start is retried at once) and read its tool list
        again (`reel mcp test`); raises ToolFault with why it failed."""
        with self._lock:
            if self._state == "failed":
                self._retry_at = 0.0
        client = self.connect(ctx)

        async def check() -> None:
            self._announce(await _list_tools(client))

        try:
            wait_for(self._loop.submit(check()), ctx, f"testing MCP server {self.name!r}")
        except ToolFault:
            raise
        except Exception as exc:
            self.reset(_reason(exc))
            raise ToolFault("failed", f"MCP server {self.name!r}: {_reason(exc)}") from None

    def call(
        self, tool: str, arguments: dict[str, Any], ctx: ExecutionContext
    ) -> Any:  # mcp_types.CallToolResult
        """``tools/call`` on the live connection; a broken connection is torn down (the next
        call restarts the server) and reported as a ToolFault."""
        from mcp.shared.exceptions import MCPError

        client = self.connect(ctx)
        future = self._loop.submit(client.call_tool(tool, arguments))
        try:
            return wait_for(future, ctx, f"calling {tool!r}")
        except ToolFault:
            self.reset("a call was abandoned (cancel or deadline)")
            raise
        except MCPError as exc:
            if exc.error.code == -32000:  # CONNECTION_CLOSED: the server went away
                self.reset("the server closed the connection")
                raise ToolFault(
                    "failed", f"MCP server {self.name!r} closed the connection mid-call"
                ) from None
            raise ToolFault("failed", f"MCP server {self.name!r}: {exc.error.message}") from None
        except Exception as exc:
            self.reset(f"{type(exc).__name__}")
            raise ToolFault(
                "failed", f"MCP server {self.name!r} failed the call: {type(exc).__name__}"
            ) from None

    def reset(self, why: str) -> None:
        """Tear the connection down (its task is cancelled, the transport kills the server);
        the next call starts the server again."""
        with self._lock:
            task, closed = self._task, self._closed if self._client is not None else None
            self._task, self._closed, self._ready, self._client = None, None, None, None
            if self._state in ("running", "starting"):
                self._state, self._reason = "stopped", why
        _end(task, closed)

    def close(self) -> None:
        """Stop the server for good (the node is draining): its connection's task is cancelled,
        which kills the sandbox (`McpLoop.close` waits for that)."""
        with self._lock:
            task, closed = self._task, self._closed if self._client is not None else None
            self._task, self._closed, self._ready, self._client = None, None, None, None
            self._state, self._reason = "stopped", "closed"
        _end(task, closed)

    def _failed(self, reason: str) -> None:
        with self._lock:
            self._failures += 1
            backoff = min(BACKOFF_FIRST_S * 2 ** (self._failures - 1), BACKOFF_MAX_S)
            self._state, self._reason = "failed", reason
            self._retry_at = time.monotonic() + backoff
            task, closed = self._task, self._closed if self._client is not None else None
            self._task, self._closed, self._ready, self._client = None, None, None, None
        _end(task, closed)

    async def _session(self) -> Any:
        """Start the connection's task and wait until it is up (its client) or failed."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        ready.add_done_callback(_retrieved)  # whoever waited may have given up
        task = loop.create_task(self._hold(ready))
        with self._lock:
            self._task = task
        return await asyncio.shield(ready)

    async def _hold(self, ready: asyncio.Future[Any]) -> None:
        """Connect, read the tool list, publish the client, then hold the connection open
        until the server exits or the task is cancelled (`reset`, `close`)."""
        from mcp import Client

        closed = asyncio.Event()
        with self._lock:
            self._closed = closed
        try:
            async with Client(
                self._start(closed), message_handler=self._message, mode="legacy"
            ) as client:
                self._announce(await _list_tools(client))
                with self._lock:
                    self._client, self._state, self._reason = client, "running", None
                    self._failures, self._version = 0, client.protocol_version
                ready.set_result(client)
                await closed.wait()
            self._gone(client, "the server exited")
        except Exception as exc:  # a failed start, reported through `ready`
            if not ready.done():
                self._failed(_reason(exc))
                ready.set_exception(ToolFault("failed", _reason(exc)))
            elif not ready.cancelled():
                self._gone(ready.result(), f"the connection failed: {_reason(exc)}")
        except BaseException:  # cancelled (`reset`, `close`, a start past its time-out)
            if not ready.done():
                ready.cancel()
            raise

    def _gone(self, client: Any, why: str) -> None:
        """The connection of ``client`` ended by itself: the next call starts a new one."""
        with self._lock:
            if self._client is client:
                self._state, self._reason, self._client = "stopped", why, None
                self._ready = self._task = None

    async def _message(self, message: Any) -> None:
        import mcp_types as types

        if isinstance(message, types.ToolListChangedNotification):
            client = self._client
            if client is not None:
                with contextlib.suppress(Exception):
                    self._announce(await _list_tools(client))

    def _announce(self, tools: tuple[AnnouncedTool, ...]) -> None:
        with self._lock:
            changed, self._tools = tools != self._tools, tools
        if changed:
            self._on_tools(self.name, tools)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _end(task: asyncio.Task[None] | None, closed: asyncio.Event | None) -> None:
    """End a connection's task: a running one by setting its ``closed`` event (it leaves its
    transport normally), one still starting by cancelling it."""
    if task is not None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing left to stop
            task.get_loop().call_soon_threadsafe(closed.set if closed is not None else task.cancel)


async def _list_tools(client: Any) -> tuple[AnnouncedTool, ...]:
    found: list[AnnouncedTool] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor, cache_mode="refresh")
        for tool in page.tools:
            hint = tool.annotations.read_only_hint if tool.annotations is not None else None
            found.append(
                AnnouncedTool(
                    name=tool.name,
                    description=tool.description or "",
                    input_schema=dict(tool.input_schema),
                    read_only_hint=hint,
                )
            )
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(sorted(found, key=lambda t: t.name))


def _reason(exc: BaseException) -> str:
    """One line: a ToolFault's message, an ExceptionGroup's first leaf, else the exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ToolFault):
        return exc.message
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
