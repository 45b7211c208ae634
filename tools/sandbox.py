"""The bubblewrap sandbox ``shell.run`` runs in, and the start-up probe that decides whether it can.

``shell.run`` never runs a program outside this sandbox. When bubblewrap is missing, or cannot
create its namespaces here, `probe` returns the reason and ``shell.run`` is disabled with it
(``reel tools``, the node's ready line); there is no unconfined fallback.

The profile, option by option, and why:

- Identity: the program never runs as host root. A root node starts bwrap as an unprivileged
  host user (``shell_uid``/``shell_gid``; `tools.sandbox_user`), a node that is not root as
  itself; in both cases bwrap creates an unprivileged user namespace, so the program's uid is
  a plain host uid that no sysctl, ``/proc`` or device check treats as root.
- ``--unshare-all`` with ``--unshare-user --disable-userns``: own user, mount, PID, IPC, UTS,
  cgroup and network namespaces, and no nested user namespaces (a kernel that cannot give an
  unprivileged user namespace gets no shell.run: the probe says why). PID namespace: the
  program sees only its own processes, never ``/proc/<node pid>``; bwrap is PID 1 inside and
  when it exits the kernel kills everything left in the namespace, so ``setsid``, ``nohup``
  and double forks die with the call (normal exit, time-out, cancel, output cap, write
  bound). Network namespace: only a private loopback (not the host's: the node's own ports
  are unreachable), unless ``shell_network`` (``--share-net``; the tool then declares
  ``net.egress`` so policy sees it).
- ``--cap-drop ALL``: no capabilities, not even inside the user namespace.
- ``--seccomp``: the filter of `tools.seccomp` (mounts, namespaces, ptrace, keyrings, bpf,
  modules, clocks, io_uring, ... refused), installed by bwrap right before the program runs.
- Processes: the program is started through ``prlimit --nproc`` inside the sandbox, so at most
  ``shell_max_processes`` processes and threads of the call exist at once (the count is per
  user namespace: the node's own processes do not count against it).
- ``--die-with-parent``: the sandbox gets SIGKILL if the node dies; ``--new-session``: the
  program is in its own session (no TIOCSTI into a terminal).
- Filesystem: an empty tmpfs root made read-only last (``--remount-ro /``). ``/usr``,
  ``/bin``, ``/sbin``, ``/lib*`` read-only (merged-usr symlinks stay symlinks); every
  ``shell_path`` directory outside them read-only; ``/etc`` holds only what programs need to
  start (the ld.so cache and config, ``alternatives``, ``localtime``, ``services``,
  ``protocols``) and a synthetic ``passwd``/``group`` (no host accounts); with network also
  ``resolv.conf``, ``hosts``, ``nsswitch.conf``, ``gai.conf`` and the CA certificates (never
  ``/etc/ssl/private``). ``/proc`` is the sandbox's own and read-only as a whole (so
  ``/proc/sys``, ``/proc/sysrq-trigger`` and the program's own ``/proc/self`` files cannot be
  written, by any uid); there is no ``/sys``. ``/dev`` is bwrap's minimal set (null, zero,
  full, random, urandom, tty, pts) made read-only; ``/tmp`` a private tmpfs of
  ``shell_tmp_bytes`` that vanishes with the call. The workspace is bound at ``/workspace``
  from a descriptor opened with ``O_NOFOLLOW`` (no path to race); it is the only host path
  the program can write. Node paths that lie under a bound directory (the data dir, the
  workspace's and the plugins' host paths, ``shell_hidden_paths``) are covered by an empty
  read-only tmpfs; a bound directory inside one of them is refused. Nothing else of the host
  is there: no ``/home``, ``/root``, ``/run``, ``/var``, ``/sys``, host ``/tmp``.
- Environment: bwrap starts with an empty one (so PID 1's ``/proc/1/environ`` is empty), the
  program gets PATH (``shell_path``), LANG and HOME=/workspace only. bwrap's own options come
  through ``--args FD``, so PID 1's ``/proc/1/cmdline`` names no host path.

What it does not hide: the kernel's remaining system calls (the residual risk of any
namespace sandbox, narrowed by the filter), ``/proc/self/mountinfo`` (it names the host path
the workspace is bound from: a bind mount's source path is part of the mount and no mount
option removes it), host-wide ``/proc`` files such as ``/proc/cpuinfo`` and
``/proc/meminfo`` (readable, never writable), and CPU and memory use beyond the per-process
rlimits (no cgroup).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from tools.sandbox_user import SandboxUser, launcher, stage_for
from tools.seccomp import compile_filter

__all__ = ["GUEST_WORKSPACE", "Launch", "Sandbox", "probe", "probe_ahead", "resolve_bwrap"]

GUEST_WORKSPACE = "/workspace"
"""Where the workspace appears inside the sandbox (also its HOME and default cwd)."""

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""Bound read-only (or recreated as symlinks on merged-usr systems)."""

ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "services",
    "protocols",
)
ETC_NETWORK_FILES = (
    "resolv.conf",
    "hosts",
    "nsswitch.conf",
    "gai.conf",
    "host.conf",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "ca-certificates.conf",
    "pki/tls/certs",
    "pki/ca-trust",
)
"""Only with network; ``ssl/certs`` and not ``ssl``: ``/etc/ssl/private`` holds host keys."""

_PROBE_TIMEOUT_S = 10.0
_PRLIMIT = "prlimit"
"""util-linux's prlimit: sets the process limit inside the sandbox, then executes the program."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A bubblewrap profile that `probe` has seen work on this machine."""

    bwrap: str
    """Absolute path of the bubblewrap executable."""
    path_dirs: tuple[str, ...]
    """``shell_path``'s directories; bound read-only where no system directory covers them."""
    network: bool
    tmp_bytes: int
    hidden: tuple[str, ...]
    """Real host paths that must stay invisible (the node adds its data dir)."""
    prlimit: str
    """Absolute path of ``prlimit``, visible inside the sandbox."""
    seccomp: bytes
    """The compiled filter of `tools.seccomp`."""
    user: SandboxUser | None = None
    """The host identity bwrap is started as (a root node), or None: the node's own."""
    stage: str = ""
    """With `user`: where the launcher mounts the workspace for bwrap to bind."""
    version: str = ""

    def describe(self) -> str:
        """One line for logs: which bubblewrap, the network, and the host identity."""
        net = "shared" if self.network else "none"
        name = self.version or "bubblewrap"
        who = f"uid {self.user.uid}" if self.user else f"uid {os.geteuid()}"
        return f"{name} ({self.bwrap}; network {net}; runs as {who}; seccomp on)"

    def binds(self) -> list[tuple[str, str]]:
        """(kind, host path) of the read-only system binds: ``symlink`` or ``dir``."""
        out: list[tuple[str, str]] = []
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                out.append(("symlink", path))
            elif os.path.isdir(path):
                out.append(("dir", path))
        covered = [os.path.realpath(p) for kind, p in out if kind == "dir"]
        for path in self.path_dirs:
            real = os.path.realpath(path)
            if os.path.isdir(real) and not any(_under(real, c) for c in covered):
                out.append(("dir", real))
                covered.append(real)
        return out

    def roots(self) -> list[str]:
        """Real host directories visible (read-only) inside the sandbox."""
        return [os.path.realpath(p) for kind, p in self.binds() if kind == "dir"]

    def visible(self, host_path: str) -> bool:
        """Whether the real file ``host_path`` is inside a bound directory and not hidden."""
        real = os.path.realpath(host_path)
        if any(_under(real, h) for h in self.hidden):
            return False
        return any(_under(real, r) for r in self.roots())

    def conflicts(self, extra_hidden: Iterable[str] = ()) -> str | None:
        """Why this profile cannot hide what it must (a bound directory inside a hidden one)."""
        for h in (*self.hidden, *extra_hidden):
            for r in self.roots():
                if h != "/" and _under(r, h):
                    return f"sandbox: {r} would be visible but lies inside the node's {h}"
        return None

    def options(self, *, cwd: str, env: dict[str, str], hidden: Sequence[str]) -> list[str]:
        """bwrap's options, without the workspace bind (see `Launch`); ``hidden`` adds real
        paths to cover on top of `hidden`."""
        opts = ["--unshare-all", "--unshare-user", "--disable-userns"]
        if self.network:
            opts.append("--share-net")
        opts += ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--hostname", "reel"]
        roots: list[str] = []
        for kind, path in self.binds():
            if kind == "symlink":
                opts += ["--symlink", os.readlink(path), path]
            else:
                opts += ["--ro-bind", path, path]
                roots.append(os.path.realpath(path))
        etc = ETC_FILES + (ETC_NETWORK_FILES if self.network else ())
        for name in etc:
            opts += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for h in sorted({*self.hidden, *hidden}):
            if h != "/" and any(_under(h, r) and h != r for r in roots) and os.path.isdir(h):
                opts += ["--tmpfs", h, "--remount-ro", h]
        opts += [
            "--proc",
            "/proc",
            "--remount-ro",
            "/proc",
            "--dev",
            "/dev",
            "--remount-ro",
            "/dev",
        ]
        opts += ["--size", str(self.tmp_bytes), "--tmpfs", "/tmp"]
        opts += ["--clearenv"]
        for key, value in env.items():
            opts += ["--setenv", key, value]
        opts += ["--chdir", cwd]
        return opts


@dataclass
class Launch:
    """The descriptors and command line of one sandboxed start; `close` in a ``finally``.

    bwrap reads its options from a memfd (``--args``), the synthetic passwd and group and the
    seccomp filter from three more, binds the workspace from ``workspace_fd`` and reports on a
    pipe (``--json-status-fd``) whether the sandbox was set up (``child-pid``) and the exit
    code.
    """

    argv: list[str]
    pass_fds: tuple[int, ...]
    status_read: int
    preexec: Callable[[], None] | None
    """What the child runs between fork and exec (`subprocess.Popen`'s ``preexec_fn``): the
    caller's limits, then, for a root node, `tools.sandbox_user.launcher`."""
    _child_ends: list[int] = field(default_factory=list)
    _closed: bool = False
    _status: bytearray = field(default_factory=bytearray)
    _pidfd: int | None = None

    @classmethod
    def prepare(
        cls,
        sandbox: Sandbox,
        *,
        workspace_fd: int,
        cwd: str,
        env: dict[str, str],
        command: Sequence[str],
        max_processes: int,
        hidden: Sequence[str] = (),
        limits: Callable[[], None] | None = None,
    ) -> Launch:
        """Build a start of ``command`` (``command[0]`` an absolute path seen the same inside
        and outside) with the workspace directory ``workspace_fd`` at `GUEST_WORKSPACE`, at
        most ``max_processes`` processes at once."""
        ends: list[int] = []
        uid, gid = (sandbox.user.uid, sandbox.user.gid) if sandbox.user else _own_ids()
        try:
            passwd = _memfd("passwd", _passwd(uid, gid))
            ends.append(passwd)
            group = _memfd("group", _group(gid))
            ends.append(group)
            seccomp = _memfd("seccomp", sandbox.seccomp)
            ends.append(seccomp)
            status_read, status_write = os.pipe()
            os.set_blocking(status_read, False)
            ends.append(status_write)
            opts = sandbox.options(cwd=cwd, env=env, hidden=hidden)
            opts += ["--ro-bind-data", str(passwd), "/etc/passwd"]
            opts += ["--ro-bind-data", str(group), "/etc/group"]
            if sandbox.user is None:
                opts += ["--bind-fd", str(workspace_fd), GUEST_WORKSPACE]
            else:
                opts += ["--bind", sandbox.stage, GUEST_WORKSPACE]
            opts += ["--remount-ro", "/", "--json-status-fd", str(status_write)]
            opts += ["--seccomp", str(seccomp)]
            args = _memfd("args", b"".join(o.encode() + b"\0" for o in opts))
            ends.append(args)
        except BaseException:
            for fd in ends:
                os.close(fd)
            raise
        limit = f"--nproc={max_processes}:{max_processes}"
        argv = [sandbox.bwrap, "--args", str(args), "--", sandbox.prlimit, limit, "--", *command]
        steps = [limits] if limits is not None else []
        if sandbox.user is not None:
            steps.append(launcher(sandbox.user, workspace_fd, sandbox.stage, status_write))
        return cls(
            argv=argv,
            pass_fds=(args, passwd, group, seccomp, status_write, workspace_fd),
            status_read=status_read,
            preexec=_chain(steps),
            _child_ends=ends,
        )

    def started(self) -> None:
        """Close this process's copies of what only bwrap needs (call right after the spawn)."""
        for fd in self._child_ends:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._child_ends = []

    def launcher_error(self) -> str | None:
        """Why `tools.sandbox_user.launcher` failed in the child, if it did."""
        self.status()
        for line in self._status.decode("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict) and isinstance(doc.get("launcher-error"), str):
                    return str(doc["launcher-error"])
        return None

    def status(self) -> dict[str, int]:
        """What bwrap has reported so far: ``child-pid`` (the host PID of the sandbox's PID 1)
        as soon as the namespaces exist, ``exit-code`` at the end. Never blocks."""
        if not self._closed:
            with contextlib.suppress(BlockingIOError, OSError):
                while chunk := os.read(self.status_read, 4096):
                    self._status += chunk
        report: dict[str, int] = {}
        for line in self._status.decode("utf-8", "replace").splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict):
                    report.update({k: v for k, v in doc.items() if isinstance(v, int)})
        return report

    def pid1(self) -> int | None:
        """A pidfd of the sandbox's PID 1 while it lives, else None (not reported yet, exited,
        or its PID already recycled: the process must be in the PID namespace bwrap reported,
        so another process is never taken for it). Opened once; closed by `close`."""
        if self._pidfd is None:
            report = self.status()
            pid, namespace = report.get("child-pid"), report.get("pid-namespace")
            if pid is None or namespace is None:
                return None
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                return None
            try:
                same = os.stat(f"/proc/{pid}/ns/pid").st_ino == namespace
            except OSError:
                same = False  # a zombie (already exited) or gone
            if not same:
                os.close(fd)
                return None
            self._pidfd = fd
        return self._pidfd

    def close(self) -> None:
        if not self._closed:
            self.started()
            os.close(self.status_read)
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._closed = True


def _chain(steps: list[Callable[[], None]]) -> Callable[[], None] | None:
    if not steps:
        return None

    def run() -> None:
        for step in steps:
            step()

    return run


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"reel-{name}", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _own_ids() -> tuple[int, int]:
    return os.getuid(), os.getgid()


def _passwd(uid: int, gid: int) -> bytes:
    lines = [f"root:x:0:0:root:{GUEST_WORKSPACE}:/usr/sbin/nologin"]
    if uid not in (0, 65534):
        lines.append(f"reel:x:{uid}:{gid}:reel:{GUEST_WORKSPACE}:/usr/sbin/nologin")
    lines.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    return ("\n".join(lines) + "\n").encode()


def _group(gid: int) -> bytes:
    own = [f"reel:x:{gid}:"] if gid not in (0, 65534) else []
    lines = ["root:x:0:", *own, "nogroup:x:65534:"]
    return ("\n".join(lines) + "\n").encode()


def resolve_bwrap(name: str, search_path: str) -> str | None:
    """The executable ``name`` (absolute, or looked up on ``search_path``), or None."""
    if os.path.isabs(name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name, path=search_path)


def probe(
    bwrap: str,
    *,
    search_path: str,
    network: bool,
    tmp_bytes: int,
    hidden: Sequence[str],
    user: SandboxUser | None,
) -> Sandbox | str:
    """A working `Sandbox`, or the reason there is none (one line, for ``reel tools``).

    Runs ``true`` in the real profile (as ``user`` when given, with the seccomp filter and the
    process limit), once per distinct setting in this process; when `probe_ahead` started it
    for the same settings, waits for that one's result (or exception).
    """
    key = (bwrap, search_path, network, tmp_bytes, tuple(sorted(set(hidden))), user)
    with _ahead_lock:
        pending = _ahead.get(key)
    return pending.result() if pending is not None else _probe(*key)


_Settings = tuple[str, str, bool, int, tuple[str, ...], SandboxUser | None]
_ahead: dict[_Settings, Future[Sandbox | str]] = {}
"""Probes `probe_ahead` started and not finished yet (a finished one is in `_probe`'s cache)."""
_ahead_lock = threading.Lock()


def probe_ahead(
    bwrap: str,
    *,
    search_path: str,
    network: bool,
    tmp_bytes: int,
    hidden: Sequence[str],
    user: SandboxUser | None,
) -> None:
    """Start `probe` for these settings on a thread of its own and return at once; `probe`
    with the same settings later takes its result instead of probing again.

    The probe is mostly waiting (``ldconfig`` twice for libseccomp, then bwrap running
    ``true``): the node starts it before its journal's start-up check, which it overlaps.
    """
    key = (bwrap, search_path, network, tmp_bytes, tuple(sorted(set(hidden))), user)
    future: Future[Sandbox | str] = Future()
    with _ahead_lock:
        if key in _ahead:
            return
        _ahead[key] = future

    def run() -> None:
        try:
            future.set_result(_probe(*key))
        except BaseException as exc:  # whoever waits gets it, as from probe itself
            future.set_exception(exc)
        finally:
            with _ahead_lock:
                del _ahead[key]

    threading.Thread(target=run, name="sandbox-probe", daemon=True).start()


@functools.lru_cache(maxsize=32)
def _probe(
    bwrap: str,
    search_path: str,
    network: bool,
    tmp_bytes: int,
    hidden: tuple[str, ...],
    user: SandboxUser | None,
) -> Sandbox | str:
    found = resolve_bwrap(bwrap, search_path)
    if found is None:
        where = "" if os.path.isabs(bwrap) else f" on {search_path}"
        return (
            f"bubblewrap ({bwrap!r}) was not found{where}; install the Debian package "
            "`bubblewrap` (shell.run never runs unconfined)"
        )
    dirs = tuple(d for d in search_path.split(":") if d)
    relative = [d for d in dirs if not os.path.isabs(d)]
    if relative:
        return f"shell_path: {relative[0]!r} is not an absolute directory"
    true = shutil.which("true", path=search_path)
    if true is None:
        return f"sandbox probe: no `true` on {search_path}"
    prlimit = shutil.which(_PRLIMIT, path=search_path)
    if prlimit is None:
        return f"sandbox probe: no `prlimit` (util-linux) on {search_path}"
    seccomp = compile_filter()
    if isinstance(seccomp, str):
        return seccomp
    sandbox = Sandbox(
        bwrap=found,
        path_dirs=dirs,
        network=network,
        tmp_bytes=tmp_bytes,
        hidden=tuple(os.path.realpath(h) for h in hidden),
        prlimit=prlimit,
        seccomp=seccomp,
        user=user,
        version=_version(found),
    )
    conflict = sandbox.conflicts()
    if conflict is not None:
        return conflict
    if not sandbox.visible(prlimit):
        return f"sandbox probe: {prlimit} is not visible inside the sandbox"
    if user is not None:
        staged = _staged(sandbox, user, found)
        if isinstance(staged, str):
            return staged
        sandbox = staged
    problem = _try(sandbox, true)
    if problem is None:
        return sandbox
    who = f"uid {user.uid}" if user else "this user"
    return (
        f"bubblewrap cannot create its namespaces as {who}: {problem} (it needs unprivileged user "
        "namespaces; see docs/operations.md)"
    )


def _staged(sandbox: Sandbox, user: SandboxUser, bwrap: str) -> Sandbox | str:
    """``sandbox`` with the stage for a root node's launcher, or why it cannot run as ``user``:
    bwrap resolves every bind source as that user, so each must be reachable by it."""
    for path in (*sandbox.roots(), bwrap, sandbox.prlimit):
        if not _reachable(path, user):
            return (
                f"sandbox probe: {path} is not reachable by uid {user.uid}, the unprivileged "
                "user the sandbox runs as (shell_uid): it needs search permission on every "
                "directory above"
            )
    stage = stage_for([*sandbox.roots(), "/etc", bwrap])
    if stage is None:
        return "sandbox probe: no directory to stage the workspace on (tools/sandbox_user.py)"
    return dataclasses.replace(sandbox, stage=stage)


def _reachable(path: str, user: SandboxUser) -> bool:
    """Whether ``user`` (no supplementary groups) may search every directory down to ``path``
    and read it, by mode bits (bwrap resolves bind sources as that user)."""
    current = "/"
    for part in [p for p in os.path.realpath(path).split("/") if p] + [""]:
        try:
            st = os.stat(current)
        except OSError:
            return False
        if st.st_uid == user.uid:
            need = 0o100 if part else 0o500
        elif st.st_gid == user.gid:
            need = 0o010 if part else 0o050
        else:
            need = 0o001 if part else 0o005
        if st.st_mode & need != need:
            return False
        current = os.path.join(current, part)
    return True


def _version(bwrap: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [bwrap, "--version"], capture_output=True, env={}, timeout=_PROBE_TIMEOUT_S
        )
        return done.stdout.decode("utf-8", "replace").strip()
    return ""


def _try(sandbox: Sandbox, true: str) -> str | None:
    """None if ``true`` ran in ``sandbox``; else why not (bwrap's or the launcher's words)."""
    with tempfile.TemporaryDirectory(prefix="reel-probe-") as tmp:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if sandbox.user is not None:
                os.fchown(fd, sandbox.user.uid, sandbox.user.gid)
            launch = Launch.prepare(
                sandbox,
                workspace_fd=fd,
                cwd=GUEST_WORKSPACE,
                env={"PATH": ":".join(sandbox.path_dirs)},
                command=[true],
                max_processes=2,
            )
            try:
                done = subprocess.run(
                    launch.argv,
                    pass_fds=launch.pass_fds,
                    preexec_fn=launch.preexec,
                    capture_output=True,
                    env={},
                    timeout=_PROBE_TIMEOUT_S,
                )
                launch.started()
                report = launch.status()
            except (OSError, subprocess.SubprocessError) as exc:
                return launch.launcher_error() or str(exc)
            finally:
                launch.close()
        except OSError as exc:
            return str(exc)
        finally:
            os.close(fd)
    if done.returncode == 0 and "child-pid" in report:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"bwrap exited with status {done.returncode}"
