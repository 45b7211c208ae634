"""shell.run: run an allowlisted executable with an argument vector, in a bubblewrap sandbox.

There is never a shell string. ``argv[0]`` must be a bare name on the allowlist, resolved
against the fixed ``shell_path`` (not the caller's PATH); if the name, or any file its path
resolves through, is an exec wrapper (`tools.wrappers`: env, xargs, find, sh, python3, ...),
it must also be in ``shell_allowed_wrappers``. The program then runs inside the sandbox of
`tools.sandbox` (only the workspace visible and writable, at ``/workspace``; own PID and
network namespaces; no capabilities; a seccomp filter; never host root; a scrubbed
environment: PATH, LANG=C.UTF-8, HOME=/workspace, plus the call's ``env``, which holds only
vault handles resolved at execution, tools/handles.py), with its working directory inside the
workspace. Without a working sandbox (probed when the runtime is built) the tool is
unavailable, never unconfined. When the node is root, the workspace's root-owned entries are
given to the sandbox's unprivileged user before each call (`tools.sandbox_user.adopt`).

rlimits are set in ``preexec_fn`` between fork and exec of bwrap and inherited by everything
in the sandbox: CPU seconds, address space, file size, no core dumps. (``preexec_fn`` is
documented as unsafe with threads because the child could deadlock on a lock held by
another thread at fork time; ours only calls ``setrlimit``, which takes no Python-level or
libc allocation locks.)

stdout and stderr are read incrementally; when either exceeds its cap, when the workspace's
file system grew past the call's write bound (`tools.write_bound`), on time-out and on
cancel bwrap's process group gets SIGKILL; bwrap's PID 1 inside the sandbox dies with it
(``--die-with-parent``) and the kernel then kills every process left in the sandbox's PID
namespace, whatever session or group it moved to. The same happens when the program exits:
nothing it started outlives the call.

bwrap reports a program killed by signal N as exit status 128 + N, as shells do; a status
above 128 is reported as that signal (a program that exits 137 on purpose reads as SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import resource
import select
import selectors
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import IO, Annotated, Any, Literal

import msgspec

from tools.config import ToolsConfig
from tools.context import ExecutionContext
from tools.handles import HandleValue, names_in, names_of, resolve_all
from tools.result import ErrorKind, Output, ToolFault, decode_text, fit_json
from tools.runtime import POLL_S, ToolRuntime
from tools.sandbox import GUEST_WORKSPACE, Launch, Sandbox, probe
from tools.sandbox import probe_ahead as sandbox_probe_ahead
from tools.sandbox_user import adopt, sandbox_user
from tools.spec import Capability, ToolSpec
from tools.workspace import confine, open_dir, open_root
from tools.wrappers import is_exec_wrapper
from tools.write_bound import WriteBound

__all__ = ["ShellArgs", "ShellRuntime"]

_BARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_CHUNK = 64 * 1024
_DRAIN_S = 1.0
_MAX_HOPS = 40
_SETUP_WAIT_S = 0.5
_KILL_WAIT_S = 5.0
_EXIT_GRACE_S = 1.0

Stop = Literal["timeout", "cancelled", "output", "write"]


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
    env: Annotated[
        dict[str, HandleValue],
        msgspec.Meta(
            description="Environment variables that carry vault secrets, each value a handle: "
            '{"vault": "NAME"} or "${vault:NAME}" (nothing else: the environment is for secrets).'
        ),
    ] = msgspec.field(default_factory=dict)

    def handles(self) -> list[str]:
        """The vault secrets the environment names (tools/handles.py)."""
        return names_of(self.env.values())

    def subject(self) -> tuple[str, ...]:
        """The grant subject: the argument vector (tools/subjects.py)."""
        return self.argv

    @classmethod
    def parse_subject(cls, text: str) -> tuple[str, ...]:
        """Words as a POSIX shell would split them (quotes group, nothing is expanded)."""
        try:
            return tuple(shlex.split(text))
        except ValueError as exc:
            raise ValueError(f"cannot split into words: {exc}") from None

    @classmethod
    def subject_kind(cls) -> str:
        return "argv"


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
_ENV_RESERVED = frozenset({"PATH", "LANG", "HOME"})
_WHOLE_HANDLE = re.compile(r"\$\{vault:[^}]*\}")


def _check_env(env: dict[str, HandleValue]) -> None:
    """Refuse an environment variable the sandbox sets itself (PATH, LANG, HOME), one of the
    loader's (``LD_*``), a name that is not ``[A-Z_][A-Z0-9_]*``, or a value that is not one
    whole handle: the call's environment carries secrets, not settings that change what the
    allowlisted program does."""
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise ToolFault("invalid", f"env.{name[:64]}: not a variable name ([A-Z_][A-Z0-9_]*)")
        if name in _ENV_RESERVED or name.startswith("LD_"):
            raise ToolFault("invalid", f"env.{name}: set by the sandbox, may not be given")
        if isinstance(value, str) and not (_WHOLE_HANDLE.fullmatch(value) and names_in(value)):
            raise ToolFault(
                "invalid",
                f'env.{name}: must be a vault handle ({{"vault": "NAME"}} or ${{vault:NAME}})',
            )


def probe_ahead(config: ToolsConfig) -> None:
    """Start the probe a `ShellRuntime` of ``config`` makes on a thread of its own (see
    `tools.sandbox.probe_ahead`); the runtime built later takes its result."""
    sandbox_probe_ahead(config.shell_bwrap, **_sandbox_settings(config))


def _sandbox_settings(config: ToolsConfig) -> dict[str, Any]:
    """The sandbox ``config`` asks for, as `tools.sandbox.probe` takes it (after the bwrap)."""
    hidden = list(config.shell_hidden_paths)
    if config.workspace_dir is not None:
        workspace = os.path.realpath(config.workspace_dir)
        hidden += [workspace, os.path.dirname(workspace)]
    if config.plugin_dir is not None:
        hidden.append(config.plugin_dir)
    return {
        "search_path": config.shell_path,
        "network": config.shell_network,
        "tmp_bytes": config.shell_tmp_bytes,
        "hidden": hidden,
        "user": sandbox_user(config.shell_uid, config.shell_gid),
    }


class ShellRuntime(ToolRuntime):
    """The shell.run tool. Building it probes the sandbox once (see `tools.sandbox.probe`), or
    takes the result of the probe `probe_ahead` began for the same config."""

    def __init__(self, config: ToolsConfig) -> None:
        self._config = config
        found = probe(config.shell_bwrap, **_sandbox_settings(config))
        self.sandbox: Sandbox | None = found if isinstance(found, Sandbox) else None
        """The working sandbox, or None when shell.run is unavailable."""
        self.unavailable: str | None = found if isinstance(found, str) else None
        """Why shell.run cannot run here (no bubblewrap, no namespaces), or None."""

    def specs(self) -> Sequence[ToolSpec]:
        cfg = self._config
        allowed = ", ".join(cfg.shell_allowlist) or "none"
        caps: set[Capability] = {"process.exec"}
        if cfg.shell_network:
            caps.add("net.egress")
        network = "with network access" if cfg.shell_network else "without network access"
        description = (
            "Run an allowlisted program with an argument vector (no shell) in a sandbox where "
            f"only the workspace (/workspace, the working directory) is visible, {network}. "
            f"Allowed programs: {allowed}."
        )
        if self.unavailable is not None:
            description = f"Unavailable on this node: {self.unavailable}"
        return (
            ToolSpec(
                name="shell.run",
                description=description,
                args_type=ShellArgs,
                capabilities=frozenset(caps),
                risk="critical",
                default_posture="disabled" if self.unavailable else "ask_each_time",
                timeout_s=cfg.shell_timeout_s,
                output_cap_bytes=max(
                    cfg.default_output_cap_bytes, cfg.shell_output_cap_bytes * 4 + 16 * 1024
                ),
                runtime="shell",
                unavailable=self.unavailable,
            ),
        )

    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        if not isinstance(args, ShellArgs):
            raise ValueError(f"shell runtime has no tool {name!r}")
        if self.sandbox is None:
            raise ToolFault("denied", f"shell.run is unavailable on this node: {self.unavailable}")
        sandbox = self.sandbox
        program = self._resolve(args.argv, sandbox)
        parts = confine(ctx.workspace, args.cwd or ".")
        with open_dir(ctx.workspace, parts):
            pass  # proves every component is a real directory inside the workspace
        stdin = (args.stdin or "").encode("utf-8")
        stdin_cap = self._config.shell_stdin_cap_bytes
        if len(stdin) > stdin_cap:
            raise ToolFault("limit", f"stdin: exceeds the cap of {stdin_cap} bytes")
        _check_env(args.env)
        env = resolve_all(args.env, ctx.secrets, "env")
        env |= {"PATH": self._config.shell_path, "LANG": "C.UTF-8", "HOME": GUEST_WORKSPACE}
        real = os.path.realpath(ctx.workspace)
        hidden = (real, os.path.dirname(real))
        conflict = sandbox.conflicts(hidden)
        if conflict is not None:
            raise ToolFault("failed", conflict)
        root = open_root(ctx.workspace)
        launch: Launch | None = None
        try:
            if sandbox.user is not None:
                adopt(root, sandbox.user)
            bound = WriteBound(root, self._config.shell_write_bytes, self._config.shell_write_files)
            launch = Launch.prepare(
                sandbox,
                workspace_fd=root,
                cwd=posixpath.join(GUEST_WORKSPACE, *parts),
                env=env,
                command=[program, *args.argv[1:]],
                max_processes=self._config.shell_max_processes,
                hidden=hidden,
                limits=_limits(self._config),  # see the module docstring
            )
            try:
                proc = subprocess.Popen(
                    launch.argv,
                    executable=sandbox.bwrap,
                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env={},
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=launch.pass_fds,
                    preexec_fn=launch.preexec,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                why = launch.launcher_error() or getattr(exc, "strerror", None) or str(exc)
                raise ToolFault("failed", f"could not start the sandbox: {why}") from None
            finally:
                launch.started()
            return self._supervise(proc, args, stdin, ctx, launch, bound)
        finally:
            if launch is not None:
                launch.close()
            os.close(root)

    def precheck(self, name: str, args: msgspec.Struct) -> str | None:
        """The program checks of :meth:`_resolve` (allowlist, wrappers, visibility)."""
        if not isinstance(args, ShellArgs) or self.sandbox is None:
            return None  # an unavailable shell.run is disabled by posture already
        try:
            _check_env(args.env)
            self._resolve(args.argv, self.sandbox)
        except ToolFault as fault:
            return str(fault)
        return None

    def _resolve(self, argv: tuple[str, ...], sandbox: Sandbox) -> str:
        """The program to run: on the allowlist, not a hidden exec wrapper, visible inside."""
        name = argv[0]
        cfg = self._config
        if any("\x00" in a for a in argv):
            raise ToolFault("invalid", "argv: arguments may not contain NUL bytes")
        if not _BARE_NAME.match(name):
            raise ToolFault(
                "denied", f"argv[0]: {name!r} must be a bare executable name, not a path"
            )
        if name not in cfg.shell_allowlist:
            raise ToolFault("denied", f"argv[0]: {name!r} is not in the shell allowlist")
        found = shutil.which(name, path=cfg.shell_path)
        if found is None:
            raise ToolFault("invalid", f"argv[0]: {name!r} was not found on the fixed PATH")
        chain = _link_chain(found)
        names = {name, *(os.path.basename(p) for p in chain)}
        if any(is_exec_wrapper(n) for n in names) and not names & set(cfg.shell_allowed_wrappers):
            via = f" (resolves to {chain[-1]})" if os.path.basename(chain[-1]) != name else ""
            raise ToolFault(
                "denied",
                f"argv[0]: {name!r}{via} is an exec wrapper: it can run programs that are not "
                "allowlisted; list it in shell_allowed_wrappers too to allow it and everything "
                "it can run",
            )
        if not sandbox.visible(found):
            raise ToolFault(
                "invalid",
                f"argv[0]: {name!r} resolves to {chain[-1]}, which is not visible in the sandbox",
            )
        return found

    def _supervise(
        self,
        proc: subprocess.Popen[bytes],
        args: ShellArgs,
        stdin: bytes,
        ctx: ExecutionContext,
        launch: Launch,
        bound: WriteBound,
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
        over: str | None = None
        leader_done = False
        try:
            while not leader_done or _reading(sel, bufs):
                if ctx.cancelled():
                    stop = "cancelled"
                elif ctx.expired():
                    stop = "timeout"
                elif (over := bound.exceeded()) is not None:
                    stop = "write"
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
                    # bwrap exits only after its PID 1 inside has: by then the kernel has
                    # killed everything left in the sandbox, so nothing holds the pipes.
                    leader_done = True
                    writer.close()
        finally:
            _end_sandbox(proc, launch, kill=stop is not None or not leader_done)
            writer.close()
            _drain(sel, bufs)
            sel.close()
            proc.stdout.close()
            proc.stderr.close()
        status = launch.status()
        if stop is None and "child-pid" not in status:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            reason = lines[-1] if lines else f"bwrap exited with status {proc.returncode}"
            raise ToolFault("failed", f"the sandbox could not start: {reason}")
        if stop is None and (over := bound.exceeded()) is not None:
            stop = "write"  # it finished between two polls, past the bound
        return self._report(proc.returncode, args, out, err, (stop, over), ctx)

    def _report(
        self,
        code: int,
        args: ShellArgs,
        out: bytearray,
        err: bytearray,
        ended: tuple[Stop | None, str | None],
        ctx: ExecutionContext,
    ) -> Output:
        """The result body; ``ended`` is why the supervisor stopped the call (if it did) and,
        for a write bound, which one."""
        stop, over = ended
        cap = self._config.shell_output_cap_bytes
        out_trunc, err_trunc = len(out) > cap, len(err) > cap
        stdout, out_lossy = decode_text(bytes(out[:cap]), truncated=out_trunc)
        stderr, err_lossy = decode_text(bytes(err[:cap]), truncated=err_trunc)
        exit_code, sig = _status(code)
        body: dict[str, Any] = {
            "argv": list(args.argv),
            "exit_code": exit_code,
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
        budget = ctx.output_budget_bytes
        if budget is not None and len(text.encode()) > budget:

            def mark(cut: dict[str, Any], field: str) -> None:
                cut[f"{field}_truncated"] = True
                cut["note"] = f"output cut to fit the result size limit of {budget} bytes"

            text, truncated = fit_json(body, ("stdout", "stderr"), budget, mark) or "", True
        failure = self._failure(exit_code, sig, stop, over)
        if failure is None:
            return Output(text=text, truncated=truncated, lossy=lossy)
        kind, message = failure
        raise ToolFault(kind, message, output=text, truncated=truncated, lossy=lossy)

    def _failure(
        self, exit_code: int | None, sig: int | None, stop: Stop | None, over: str | None
    ) -> tuple[ErrorKind, str] | None:
        cfg = self._config
        if stop == "cancelled":
            return "cancelled", "cancelled by request; sandbox killed"
        if stop == "timeout":
            return "timeout", "deadline exceeded; sandbox killed"
        if stop == "output":
            return "limit", f"output exceeded {cfg.shell_output_cap_bytes} bytes; sandbox killed"
        if stop == "write":
            return "limit", f"{over}; sandbox killed"
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            # SIGKILL we did not send comes from the hard CPU limit (soft + 1 s).
            return "limit", f"CPU time limit of {cfg.shell_cpu_s} s exceeded"
        if sig == signal.SIGXFSZ:
            return "limit", f"file size limit of {cfg.shell_file_size_bytes} bytes exceeded"
        if sig is not None:
            return "failed", f"killed by signal {signal.Signals(sig).name}"
        if exit_code:
            return "failed", f"exited with status {exit_code}"
        return None


def _status(code: int) -> tuple[int | None, int | None]:
    """(exit code, signal) from bwrap's status: negative if we killed bwrap, 128 + N when
    the program died of signal N (see the module docstring)."""
    if code < 0:
        return None, -code
    if code > 128 and (code - 128) in set(signal.Signals):
        return None, code - 128
    return code, None


def _link_chain(path: str) -> list[str]:
    """``path``, each symlink hop it goes through, and finally its real path."""
    chain = [path]
    current = path
    for _ in range(_MAX_HOPS):
        if not os.path.islink(current):
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
        chain.append(current)
    chain.append(os.path.realpath(path))
    return chain


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


def _end_sandbox(proc: subprocess.Popen[bytes], launch: Launch, *, kill: bool) -> None:
    """Return only once no process of the call is left, killing them first if ``kill``.

    bwrap may exit before the sandbox is empty: its PID 1 inside reports the program's exit
    status and bwrap exits on it, while the kernel is still killing what is left in the PID
    namespace (which it does as PID 1 exits). So the end is PID 1's exit, watched through a
    pidfd (`Launch.pid1`); its exit completes only after every other process in the namespace
    is dead. To stop a call, SIGKILL goes to PID 1 (everything else follows); if PID 1 is not
    known yet, to bwrap's group (and ``--die-with-parent`` takes PID 1 down).
    """
    pid1 = launch.pid1()
    if kill:
        deadline = time.monotonic() + _SETUP_WAIT_S
        while pid1 is None and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # bwrap reports PID 1 right after creating it
            pid1 = launch.pid1()
        if pid1 is None:
            _kill_group(proc)
        else:
            _signal(pid1)
    try:
        proc.wait(timeout=_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.wait()
    pid1 = launch.pid1() if pid1 is None else pid1
    # After a normal exit PID 1 is gone within milliseconds; one that lingers (bwrap can be
    # told a false exit through PID 1's eventfd from inside) is killed after a short grace.
    if pid1 is not None and not _exited(pid1, _KILL_WAIT_S if kill else _EXIT_GRACE_S):
        _signal(pid1)
        _exited(pid1, _KILL_WAIT_S)


def _signal(pidfd: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)


def _exited(pidfd: int, timeout_s: float) -> bool:
    """Whether the process behind ``pidfd`` exits within ``timeout_s``."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


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
