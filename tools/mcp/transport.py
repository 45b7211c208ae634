"""A stdio MCP transport whose server runs in the shell sandbox (`tools.sandbox`).

The SDK's ``stdio_client`` spawns through anyio, which cannot hand bubblewrap the descriptors
it reads its options, passwd, group and seccomp filter from (nor run the root node's launcher
between fork and exec); so the sandbox is started here with asyncio (``subprocess.Popen``'s
``pass_fds`` and ``preexec_fn``) and only the framing is bridged: one JSON-RPC message per line,
parsed by the SDK's own message adapter. Everything above the framing (handshake, version
negotiation, requests, notifications) is the SDK's ``Client``.

A line longer than ``line_cap`` bytes (a server flooding its output) ends the connection: the
session sees the stream close and every pending call fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator

import anyio
import mcp_types as types
from mcp.client._transport import TransportStreams
from mcp.shared.message import SessionMessage

from tools.result import ToolFault
from tools.sandbox import Launch

__all__ = ["NOT_JSON_RPC", "parsed", "sandboxed_stdio"]

NOT_JSON_RPC = "the server wrote a line that is not a JSON-RPC message"
"""What the session is told of such a line: never the line itself."""


def parsed(line: bytes) -> SessionMessage | ValueError:
    """One line of the server's stdout as the session reads it: a message, or an error that
    does not quote the line. Pydantic's own error quotes its start, and a server may print a
    secret of its env (a vault value) that exact-match redaction would not find cut short;
    the SDK hands such errors to the client's message handler, which may log them."""
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValueError:
        return ValueError(NOT_JSON_RPC)


@contextlib.asynccontextmanager
async def sandboxed_stdio(
    launch: Launch, executable: str, line_cap: int, closed: asyncio.Event
) -> AsyncIterator[TransportStreams]:
    """Start ``launch`` and yield the session's streams; ``closed`` is set when the server's
    output ends (it exited, crashed or flooded); the sandbox is killed on exit."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *launch.argv,
            executable=executable,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={},
            start_new_session=True,
            close_fds=True,
            pass_fds=launch.pass_fds,
            preexec_fn=launch.preexec,
            limit=line_cap,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        why = launch.launcher_error() or getattr(exc, "strerror", None) or str(exc)
        launch.close()
        raise ToolFault("failed", f"could not start the sandbox: {why}") from None
    finally:
        launch.started()
    read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)

    async def reader() -> None:
        assert proc.stdout is not None
        async with read_send:
            with contextlib.suppress(ValueError, OSError, anyio.BrokenResourceError):
                # ValueError: a line over the cap (asyncio's LimitOverrunError is one).
                while line := await proc.stdout.readline():
                    await read_send.send(parsed(line))
        closed.set()

    async def writer() -> None:
        assert proc.stdin is not None
        async with write_receive:
            with contextlib.suppress(OSError, anyio.BrokenResourceError):
                async for item in write_receive:
                    body = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    proc.stdin.write(body.encode() + b"\n")
                    await proc.stdin.drain()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        try:
            yield read_stream, write_stream
        finally:
            with anyio.CancelScope(shield=True):
                _kill(proc)
                with anyio.move_on_after(5):
                    await proc.wait()
                # asyncio's Process has no public close: its transport holds the pipes, and a
                # transport left to the garbage collector closes them on a loop that is gone.
                transport = getattr(proc, "_transport", None)
                if transport is not None:
                    transport.close()
                launch.close()
            tg.cancel_scope.cancel()


def _kill(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL bwrap's process group: bwrap is the sandbox's PID 1's parent, and when PID 1
    dies the kernel kills everything left in the sandbox's PID namespace."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
