"""The WASM runtime: WASI programs on wasmtime, under fuel, memory and time limits.

Every call gets its own `wasmtime.Engine` (the compiled module is
deserialized into it, ~0.2 ms): an engine's epoch is shared by all its
stores, so a per-call engine lets a watchdog thread interrupt exactly one
call with `Engine.increment_epoch()` when its time limit passes, the
caller's deadline passes, or the cancel event is set.

Limits: fuel (`Store.set_fuel`, out of fuel is a trap), a `StoreLimits`
memory cap (``memory.grow`` past it returns -1; a module whose initial
memory is above it fails to instantiate), and the epoch deadline. WASI gets
the JSON arguments on stdin, ``argv = [tool name]``, no environment, stdout
and stderr captured to files with a cap (the watchdog stops a module whose
stdout passes the cap), and no preopened directory unless the
program was granted a workspace subdirectory (mounted at ``/workspace``).
The entry point is ``_start``; ``proc_exit(0)`` or returning is success.

A granted subdirectory is opened from the workspace with ``O_NOFOLLOW`` on every component
and handed to wasmtime as ``/proc/self/fd/N``, so wasmtime opens exactly the directory that
was checked. wasmtime's WASI (cap-std) resolves paths inside the preopen itself and refuses
``..`` and any symlink that leads out of it (absolute or relative: ``EPERM``; tested). A hard
link cannot be told from its other name, so wasmtime would open it: before each call
`tools.workspace.scan_tree` walks the granted tree and refuses the call if any regular file
has more than one link, any symlink is absolute or contains ``..``, or a device node is
there. Residual race: a link made after the scan and before the plugin opens it (by a
concurrent ``shell.run`` — which can only link files it sees, i.e. inside the workspace — or
by another process on the host) is not caught.

wasmtime is imported where a plugin is compiled or run, not with the module: a node without
plugins never loads it (a tenth of a second of its start).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from tools.context import ExecutionContext
from tools.result import ErrorKind, Output, ToolFault, decode_text
from tools.runtime import POLL_S, ToolRuntime
from tools.spec import ToolSpec
from tools.workspace import confine, open_dir, scan_tree

if TYPE_CHECKING:
    import wasmtime

__all__ = ["WASI_MODULE", "WasmProgram", "WasmRuntime", "compile_module"]

WASI_MODULE = "wasi_snapshot_preview1"
GUEST_WORKSPACE = "/workspace"


class WasmProgram(msgspec.Struct, frozen=True, kw_only=True):
    """A compiled module and the limits it runs under."""

    name: str
    compiled: bytes
    """`Module.serialize()` output for an engine made by `_engine()`."""
    fuel: int
    memory_limit_bytes: int
    time_limit_ms: int
    output_cap_bytes: int
    workspace_subdir: str | None = None
    """Preopened at ``/workspace`` when set; read-only unless ``writable``."""
    writable: bool = False


def _engine() -> wasmtime.Engine:
    import wasmtime

    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    return wasmtime.Engine(config)


def compile_module(source: bytes, *, is_text: bool) -> bytes:
    """Compile WAT text or a binary module; raise `wasmtime.WasmtimeError` if invalid.

    Also checks the module's shape: it must export a ``_start`` function and
    import nothing but WASI preview 1 functions (ValueError otherwise).
    """
    import wasmtime

    engine = _engine()
    module = wasmtime.Module(engine, source.decode("utf-8") if is_text else source)
    for imp in module.imports:
        if imp.module != WASI_MODULE:
            raise ValueError(f"imports {imp.module}.{imp.name}; only {WASI_MODULE} is provided")
    starts = [e for e in module.exports if e.name == "_start"]
    if not starts or not isinstance(starts[0].type, wasmtime.FuncType):
        raise ValueError("does not export a `_start` function")
    return bytes(module.serialize())


class _Capture:
    """A WASI output file, read back up to ``cap + 1`` bytes.

    A file and not `WasiConfig.stdout_custom`: custom sinks call back into
    Python from wasmtime's tokio threads, which makes the interpreter abort
    at exit ("panic in a function that cannot unwind") in wasmtime-py 50.
    The watchdog stops the module once the file grows past the cap.
    """

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.cap = path, cap
        path.touch(mode=0o600)

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def over(self) -> bool:
        return self.size() > self.cap

    def read(self) -> tuple[bytes, bool]:
        """At most ``cap`` bytes, and whether more were written."""
        with self.path.open("rb") as f:
            data = f.read(self.cap + 1)
        return data[: self.cap], len(data) > self.cap

    def text(self) -> tuple[str, bool, bool]:
        """Decoded text, truncated flag, lossy flag."""
        data, truncated = self.read()
        text, lossy = decode_text(data, truncated=truncated)
        return text, truncated, lossy


class _Watchdog(threading.Thread):
    """Interrupts the call's engine when time runs out or cancel is set."""

    def __init__(
        self, engine: wasmtime.Engine, ctx: ExecutionContext, limit_s: float, stdout: _Capture
    ) -> None:
        super().__init__(name="wasm-watchdog", daemon=True)
        self._engine, self._ctx, self._stdout = engine, ctx, stdout
        self._until = min(ctx.deadline, time.monotonic() + limit_s)
        self._limit_s = limit_s
        self.finished = threading.Event()
        self.reason: tuple[ErrorKind, str] | None = None

    def run(self) -> None:
        while not self.finished.is_set():
            if self._ctx.cancelled():
                self.reason = ("cancelled", "cancelled by request")
            elif self._stdout.over():
                self.reason = ("limit", f"output exceeded {self._stdout.cap} bytes")
            elif time.monotonic() >= self._until:
                own_limit = self._until < self._ctx.deadline
                self.reason = (
                    "timeout",
                    f"time limit of {self._limit_s * 1000:.0f} ms exceeded"
                    if own_limit
                    else "deadline exceeded",
                )
            if self.reason is not None:
                self._engine.increment_epoch()
                return
            self.finished.wait(min(POLL_S, max(self._until - time.monotonic(), 0.001)))


class WasmRuntime(ToolRuntime):
    """Runs the given WASM programs, one tool each."""

    def __init__(
        self, tools: Sequence[tuple[ToolSpec, WasmProgram]], *, preopen_max_entries: int
    ) -> None:
        self._specs = tuple(spec for spec, _ in tools)
        self._programs = {spec.name: program for spec, program in tools}
        self._preopen_max_entries = preopen_max_entries

    def specs(self) -> Sequence[ToolSpec]:
        return self._specs

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        import wasmtime

        program = self._programs.get(name)
        if program is None:
            raise ValueError(f"wasm runtime has no tool {name!r}")
        engine = _engine()
        module = wasmtime.Module.deserialize(engine, program.compiled)
        store = wasmtime.Store(engine)
        store.set_fuel(program.fuel)
        store.set_limits(
            memory_size=program.memory_limit_bytes,
            table_elements=100_000,
            instances=16,
            tables=16,
            memories=4,
        )
        store.set_epoch_deadline(1)
        with contextlib.ExitStack() as stack:
            granted: str | None = None
            if program.workspace_subdir is not None:
                fd = stack.enter_context(_granted_dir(ctx.workspace, program.workspace_subdir))
                scan_tree(fd, self._preopen_max_entries, program.workspace_subdir)
                granted = f"/proc/self/fd/{fd}"  # exactly the directory vetted, no path race
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="reel-wasm-"))
            stdin_path = Path(tmp) / "stdin.json"
            stdin_path.write_bytes(msgspec.json.encode(args))
            stdout = _Capture(Path(tmp) / "stdout", program.output_cap_bytes)
            stderr = _Capture(Path(tmp) / "stderr", 200)
            wasi = wasmtime.WasiConfig()
            wasi.argv = [name]
            wasi.stdin_file = str(stdin_path)
            wasi.stdout_file = str(stdout.path)
            wasi.stderr_file = str(stderr.path)
            if granted is not None:
                wasi.preopen_dir(granted, GUEST_WORKSPACE, fs_mutable=program.writable)
            store.set_wasi(wasi)
            linker = wasmtime.Linker(engine)
            linker.define_wasi()
            watchdog = _Watchdog(engine, ctx, program.time_limit_ms / 1000, stdout)
            watchdog.start()
            try:
                code = self._start(linker, store, module, program)
            except wasmtime.Trap as trap:
                raise _trap_fault(trap, watchdog, program, stdout) from None
            except wasmtime.WasmtimeError as exc:
                # A host (WASI) call rejected its arguments: the module's fault.
                partial, truncated, lossy = stdout.text()
                raise ToolFault(
                    "failed",
                    f"host call failed: {_first_line(exc)}",
                    output=partial,
                    truncated=truncated,
                    lossy=lossy,
                ) from None
            finally:
                watchdog.finished.set()
                watchdog.join()
            return self._output(code, stdout, stderr)

    @staticmethod
    def _start(
        linker: wasmtime.Linker,
        store: wasmtime.Store,
        module: wasmtime.Module,
        program: WasmProgram,
    ) -> int:
        import wasmtime

        try:
            instance = linker.instantiate(store, module)
        except wasmtime.Trap:
            raise
        except wasmtime.WasmtimeError as exc:
            raise ToolFault(
                "limit",
                f"plugin {program.name!r} could not be instantiated within "
                f"its limits (memory {program.memory_limit_bytes} bytes): "
                f"{_first_line(exc)}",
            ) from None
        start = instance.exports(store)["_start"]
        assert isinstance(start, wasmtime.Func)
        try:
            start(store)
        except wasmtime.ExitTrap as exc:
            return int(exc.code)
        return 0

    @staticmethod
    def _output(code: int, stdout: _Capture, stderr: _Capture) -> Output:
        text, truncated, lossy = stdout.text()
        if truncated:
            # As when the watchdog saw it first: whether a plugin finished before the next poll
            # must not decide between a result and a failure.
            raise ToolFault(
                "limit",
                f"output exceeded {stdout.cap} bytes",
                output=text,
                truncated=True,
                lossy=lossy,
            )
        if code != 0:
            note, _, _ = stderr.text()
            detail = f": {note.strip()}" if note.strip() else ""
            raise ToolFault(
                "failed",
                f"exited with status {code}{detail}",
                output=text,
                truncated=truncated,
                lossy=lossy,
            )
        return Output(text=text, truncated=truncated, lossy=lossy)


def _trap_fault(
    trap: wasmtime.Trap, watchdog: _Watchdog, program: WasmProgram, stdout: _Capture
) -> ToolFault:
    import wasmtime

    partial, truncated, lossy = stdout.text()
    code = trap.trap_code
    kind: ErrorKind
    if code == wasmtime.TrapCode.INTERRUPT and watchdog.reason is not None:
        kind, message = watchdog.reason
    elif code == wasmtime.TrapCode.OUT_OF_FUEL:
        kind, message = "limit", f"fuel exhausted ({program.fuel} units)"
    else:
        kind, message = "failed", f"trap: {_first_line(trap)}"
    return ToolFault(kind, message, output=partial, truncated=truncated, lossy=lossy)


def _first_line(exc: BaseException) -> str:
    """The cause of a wasmtime error, without the backtrace that precedes it."""
    text = str(exc).strip()
    if "Caused by:" in text:
        text = text.split("Caused by:", 1)[1].strip()
    for line in text.splitlines():
        line = line.strip()
        if line:
            head, sep, rest = line.partition(": ")
            return rest if sep and head.isdigit() else line
    return type(exc).__name__


@contextlib.contextmanager
def _granted_dir(workspace: Path, subdir: str) -> Iterator[int]:
    """A descriptor of the granted subdir, walked from the workspace with O_NOFOLLOW."""
    with open_dir(workspace, confine(workspace, subdir)) as fd:
        yield fd
