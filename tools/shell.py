"""shell.run: run an allowlisted executable with an argument vector, under limits.

There is never a shell string. ``argv[0]`` must be a bare name on the
allowlist, resolved against the fixed ``shell_path`` (not the caller's PATH).
The child gets a scrubbed environment (PATH, LANG=C.UTF-8, HOME=workspace),
a working directory inside the workspace, its own session and process group,
and rlimits set in ``preexec_fn`` between fork and exec: CPU seconds,
address space, file size, no core dumps. (``preexec_fn`` is documented as
unsafe with threads because the child could deadlock on a lock held by
another thread at fork time; ours only calls ``setrlimit``, which takes no
Python-level or libc allocation locks.)

stdout and stderr are read incrementally; when either exceeds its cap, on
time-out and on cancel the whole process group gets SIGKILL. When the main
process exits, anything it left running in its group is killed too. A
process that escapes its group with ``setsid`` is out of reach (no cgroups).
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Annotated, Literal

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.result import ErrorKind, Fault, Output, decode_text
from tools.runtime import POLL_S, ToolRuntime
from tools.spec import ToolSpec
from tools.workspace import confine, open_dir

__all__ = ["ShellArgs", "ShellRuntime"]

_BARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_CHUNK = 64 * 1024
_DRAIN_S = 1.0

Stop = Literal["timeout", "cancelled", "output"]


class ShellArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    argv: Annotated[
        tuple[str, ...],
        msgspec.Meta(
            min_length=1,
            max_length=128,
            description="Executable name (allowlisted) followed by its arguments.",
        ),
    ]
    cwd: Annotated[str, msgspec.Meta(description="Directory relative to the workspace.")] | None = (
        None
    )
    stdin: Annotated[str, msgspec.Meta(description="Text fed to standard input.")] | None = None


class ShellRuntime(ToolRuntime):
    """The shell.run tool."""

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config

    def specs(self) -> Sequence[ToolSpec]:
        cfg = self._config
        allowed = ", ".join(cfg.shell_allowlist) or "none"
        return (
            ToolSpec(
                name="shell.run",
                description="Run an allowlisted program with an argument vector (no shell) in "
                f"the workspace. Allowed programs: {allowed}.",
                args_type=ShellArgs,
                capabilities=frozenset({"process.exec"}),
                risk="critical",
                default_posture="ask_each_time",
                timeout_s=cfg.shell_timeout_s,
                output_cap_bytes=max(
                    cfg.default_output_cap_bytes, cfg.shell_output_cap_bytes * 4 + 16 * 1024
                ),
                runtime="shell",
            ),
        )

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        if not isinstance(args, ShellArgs):
            raise ValueError(f"shell runtime has no tool {name!r}")
        executable = self._resolve(args.argv)
        cwd = _working_dir(ctx.workspace, args.cwd)
        stdin = (args.stdin or "").encode("utf-8")
        stdin_cap = self._config.shell_stdin_cap_bytes
        if len(stdin) > stdin_cap:
            raise Fault("limit", f"stdin: exceeds the cap of {stdin_cap} bytes")
        env = {
            "PATH": self._config.shell_path,
            "LANG": "C.UTF-8",
            "HOME": os.path.realpath(ctx.workspace),
        }
        try:
            proc = subprocess.Popen(
                list(args.argv),
                executable=executable,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_limits(self._config),  # see the module docstring
            )
        except OSError as exc:
            problem = f"argv[0]: could not start {args.argv[0]!r}: {exc.strerror}"
            raise Fault("failed", problem) from None
        return self._supervise(proc, args, stdin, ctx)

    def _resolve(self, argv: tuple[str, ...]) -> str:
        name = argv[0]
        if any("\x00" in a for a in argv):
            raise Fault("invalid", "argv: arguments may not contain NUL bytes")
        if not _BARE_NAME.match(name):
            raise Fault("denied", f"argv[0]: {name!r} must be a bare executable name, not a path")
        if name not in self._config.shell_allowlist:
            raise Fault("denied", f"argv[0]: {name!r} is not in the shell allowlist")
        found = shutil.which(name, path=self._config.shell_path)
        if found is None:
            raise Fault("invalid", f"argv[0]: {name!r} was not found on the fixed PATH")
        return found

    def _supervise(
        self, proc: subprocess.Popen[bytes], args: ShellArgs, stdin: bytes, ctx: ExecutionContext
    ) -> Output:
        cap = self._config.shell_output_cap_bytes
        assert proc.stdout is not None and proc.stderr is not None
        out, err = bytearray(), bytearray()
        bufs: dict[int, bytearray] = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        sel = selectors.DefaultSelector()
        for pipe in (proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ)
        writer = _StdinWriter(proc.stdin, stdin, sel)
        stop: Stop | None = None
        leader_done = False
        try:
            while not leader_done or _reading(sel, bufs):
                if ctx.cancelled():
                    stop = "cancelled"
                elif ctx.expired():
                    stop = "timeout"
                if stop is not None:
                    break
                if sel.get_map():
                    for key, _ in sel.select(timeout=POLL_S):
                        if key.fileobj is proc.stdin:
                            writer.write()
                        elif _read_into(key.fileobj, bufs, sel) and len(bufs[key.fd]) > cap:
                            stop = "output"
                    if stop is not None:
                        break
                else:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=POLL_S)
                if not leader_done and proc.poll() is not None:
                    # Reaped first, so its exit status is its own; then whatever it
                    # left in its group dies, or it would hold the pipes open.
                    leader_done = True
                    writer.close()
                    _kill_group(proc)
        finally:
            if not leader_done:
                _kill_group(proc)
            proc.wait()
            writer.close()
            _drain(sel, bufs)
            sel.close()
            proc.stdout.close()
            proc.stderr.close()
        return self._report(proc, args, out, err, stop)

    def _report(
        self,
        proc: subprocess.Popen[bytes],
        args: ShellArgs,
        out: bytearray,
        err: bytearray,
        stop: Stop | None,
    ) -> Output:
        cap = self._config.shell_output_cap_bytes
        out_trunc, err_trunc = len(out) > cap, len(err) > cap
        stdout, out_lossy = decode_text(bytes(out[:cap]), truncated=out_trunc)
        stderr, err_lossy = decode_text(bytes(err[:cap]), truncated=err_trunc)
        code = proc.returncode
        sig = -code if code < 0 else None
        body = {
            "argv": list(args.argv),
            "exit_code": code if code >= 0 else None,
            "signal": signal.Signals(sig).name if sig else None,
            "stdout": stdout,
            "stderr": stderr,
            "stdout_truncated": out_trunc,
            "stderr_truncated": err_trunc,
            "lossy": out_lossy or err_lossy,
            "timed_out": stop == "timeout",
            "cancelled": stop == "cancelled",
        }
        text = msgspec.json.encode(body).decode()
        truncated, lossy = out_trunc or err_trunc, out_lossy or err_lossy
        failure = self._failure(code, stop)
        if failure is None:
            return Output(text=text, truncated=truncated, lossy=lossy)
        kind, message = failure
        raise Fault(kind, message, output=text, truncated=truncated, lossy=lossy)

    def _failure(self, code: int, stop: Stop | None) -> tuple[ErrorKind, str] | None:
        cfg = self._config
        if stop == "cancelled":
            return "cancelled", "cancelled by request; process group killed"
        if stop == "timeout":
            return "timeout", "deadline exceeded; process group killed"
        if stop == "output":
            return "limit", f"output exceeded {cfg.shell_output_cap_bytes} bytes; process killed"
        if code == -signal.SIGXCPU or code == -signal.SIGKILL:
            # SIGKILL we did not send comes from the hard CPU limit (soft + 1 s).
            return "limit", f"CPU time limit of {cfg.shell_cpu_s} s exceeded"
        if code == -signal.SIGXFSZ:
            return "limit", f"file size limit of {cfg.shell_file_size_bytes} bytes exceeded"
        if code < 0:
            return "failed", f"killed by signal {signal.Signals(-code).name}"
        if code > 0:
            return "failed", f"exited with status {code}"
        return None


class _StdinWriter:
    """Feeds stdin without blocking, from the same select loop as the readers."""

    def __init__(self, pipe: IO[bytes] | None, data: bytes, sel: selectors.BaseSelector) -> None:
        self._pipe, self._data, self._sel, self._off = pipe, data, sel, 0
        if pipe is not None:
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_WRITE)

    def write(self) -> None:
        if self._pipe is None:
            return
        try:
            self._off += os.write(self._pipe.fileno(), self._data[self._off : self._off + _CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:
            self._off = len(self._data)
        if self._off >= len(self._data):
            self.close()

    def close(self) -> None:
        if self._pipe is not None:
            if self._pipe in {k.fileobj for k in self._sel.get_map().values()}:
                self._sel.unregister(self._pipe)
            with contextlib.suppress(BrokenPipeError):
                self._pipe.close()
            self._pipe = None


def _read_into(fileobj: object, bufs: dict[int, bytearray], sel: selectors.BaseSelector) -> bool:
    """Read what is available; unregister on EOF. True if bytes were read."""
    assert hasattr(fileobj, "fileno")
    fd: int = fileobj.fileno()
    try:
        chunk = os.read(fd, _CHUNK)
    except BlockingIOError:
        return False
    if not chunk:
        sel.unregister(fileobj)
        return False
    bufs[fd] += chunk
    return True


def _reading(sel: selectors.BaseSelector, bufs: dict[int, bytearray]) -> bool:
    return any(k.fd in bufs for k in sel.get_map().values())


def _drain(sel: selectors.BaseSelector, bufs: dict[int, bytearray]) -> None:
    """After the group is dead, collect what is still buffered in the pipes."""
    readers = [k for k in sel.get_map().values() if k.fd in bufs]
    for key in readers:
        sel.modify(key.fileobj, selectors.EVENT_READ)
    budget = 0
    while any(k.fd in bufs for k in sel.get_map().values()) and budget < _DRAIN_S / POLL_S:
        budget += 1
        for key, _ in sel.select(timeout=POLL_S):
            if key.fd in bufs:
                _read_into(key.fileobj, bufs, sel)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _working_dir(workspace: Path, cwd: str | None) -> str:
    parts = confine(workspace, cwd or ".")
    with open_dir(workspace, parts):
        pass  # proves every component is a real directory inside the workspace
    return os.path.join(os.path.realpath(workspace), *parts)


def _limits(config: ToolsConfig) -> Callable[[], None]:
    """The rlimits to apply in the child, clamped to what this process may grant."""
    wanted = (
        (resource.RLIMIT_CPU, config.shell_cpu_s, config.shell_cpu_s + 1),
        (resource.RLIMIT_AS, config.shell_memory_bytes, config.shell_memory_bytes),
        (resource.RLIMIT_FSIZE, config.shell_file_size_bytes, config.shell_file_size_bytes),
        (resource.RLIMIT_CORE, 0, 0),
    )
    plan: list[tuple[int, tuple[int, int]]] = []
    for which, soft, hard in wanted:
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        plan.append((which, (soft, hard)))

    def apply() -> None:
        for which, pair in plan:
            resource.setrlimit(which, pair)

    return apply
