"""The bubblewrap sandbox ``shell.run`` runs in, and the start-up probe that decides whether it can.

``shell.run`` never runs a program outside this sandbox. When bubblewrap is missing, or cannot
create its namespaces here, `probe` returns the reason and ``shell.run`` is disabled with it
(``reel tools``, the node's ready line); there is no unconfined fallback.

The profile, option by option, and why:

- ``--unshare-all``: own mount, PID, IPC, UTS, cgroup and network namespaces, plus
  ``--unshare-user --disable-userns`` where the kernel allows a user namespace (the sandbox
  cannot make nested ones), else ``--unshare-user-try`` (e.g. root in a container without
  user namespaces; the probe records which). PID namespace: the program sees only its own
  processes, never ``/proc/<node pid>``; bwrap is PID 1 inside and when it exits the kernel
  kills everything left in the namespace, so ``setsid``, ``nohup`` and double forks die with
  the call (normal exit, time-out, cancel, output cap). Network namespace: only a private
  loopback (not the host's: the node's own ports are unreachable), unless ``shell_network``
  (``--share-net``; the tool then declares ``net.egress`` so policy sees it).
- ``--cap-drop ALL``: no capabilities, also as uid 0 inside a user namespace, where bwrap
  would otherwise keep them.
- ``--die-with-parent``: the sandbox gets SIGKILL if the node dies; ``--new-session``: the
  program is in its own session (no TIOCSTI into a terminal).
- Filesystem: an empty tmpfs root made read-only last (``--remount-ro /``). ``/usr``,
  ``/bin``, ``/sbin``, ``/lib*`` read-only (merged-usr symlinks stay symlinks); every
  ``shell_path`` directory outside them read-only; ``/etc`` holds only what programs need to
  start (the ld.so cache and config, ``alternatives``, ``localtime``, ``services``,
  ``protocols``) and a synthetic ``passwd``/``group`` (no host accounts); with network also
  ``resolv.conf``, ``hosts``, ``nsswitch.conf``, ``gai.conf`` and the CA certificates (never
  ``/etc/ssl/private``). ``/proc`` is the sandbox's own; ``/dev`` is bwrap's minimal set
  (null, zero, full, random, urandom, tty, pts) made read-only; ``/tmp`` a private tmpfs of
  ``shell_tmp_bytes`` that vanishes with the call. The workspace is bound at ``/workspace``
  from a descriptor opened with ``O_NOFOLLOW`` (no path to race); it is the only host path
  the program can write. Node paths that lie under a bound directory (the data dir, the
  workspace's and the plugins' host paths, ``shell_hidden_paths``) are covered by an empty
  read-only tmpfs; a bound directory inside one of them is refused. Nothing else of the host
  is there: no ``/home``, ``/root``, ``/run``, ``/var``, ``/sys``, host ``/tmp``.
- Environment: bwrap starts with an empty one (so PID 1's ``/proc/1/environ`` is empty), the
  program gets PATH (``shell_path``), LANG and HOME=/workspace only. bwrap's own options come
  through ``--args FD``, so PID 1's ``/proc/1/cmdline`` names no host path.

What it does not hide: the kernel (no seccomp filter: the kernel's system-call surface is
the residual risk of any namespace sandbox), ``/proc/self/mountinfo`` (it names the host path
the workspace is bound from), host-wide ``/proc`` files such as ``/proc/cpuinfo`` and
``/proc/meminfo``, and CPU and memory use beyond the per-process rlimits (no cgroup).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["GUEST_WORKSPACE", "Launch", "Sandbox", "probe", "resolve_bwrap"]

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
_USERNS_STRICT = ("--unshare-user", "--disable-userns")
_USERNS_TRY = ("--unshare-user-try",)


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
    userns: tuple[str, ...] = _USERNS_STRICT
    """The user-namespace options the probe found working."""
    version: str = ""

    def describe(self) -> str:
        """One line for logs: which bubblewrap, and whether nested user namespaces are off."""
        nested = "off" if self.userns == _USERNS_STRICT else "kernel default"
        net = "shared" if self.network else "none"
        name = self.version or "bubblewrap"
        return f"{name} ({self.bwrap}; network {net}; nested userns {nested})"

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
        opts = ["--unshare-all", *self.userns]
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
        opts += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"]
        opts += ["--size", str(self.tmp_bytes), "--tmpfs", "/tmp"]
        opts += ["--clearenv"]
        for key, value in env.items():
            opts += ["--setenv", key, value]
        opts += ["--chdir", cwd]
        return opts


@dataclass
class Launch:
    """The descriptors and command line of one sandboxed start; `close` in a ``finally``.

    bwrap reads its options from a memfd (``--args``), the synthetic passwd and group from two
    more, binds the workspace from ``workspace_fd`` and reports on a pipe (``--json-status-fd``)
    whether the sandbox was set up (``child-pid``) and the exit code.
    """

    argv: list[str]
    pass_fds: tuple[int, ...]
    status_read: int
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
        hidden: Sequence[str] = (),
    ) -> Launch:
        """Build a start of ``command`` (``command[0]`` an absolute path seen the same inside
        and outside) with the workspace directory ``workspace_fd`` at `GUEST_WORKSPACE`."""
        ends: list[int] = []
        try:
            passwd = _memfd("passwd", _passwd())
            ends.append(passwd)
            group = _memfd("group", _group())
            ends.append(group)
            status_read, status_write = os.pipe()
            os.set_blocking(status_read, False)
            ends.append(status_write)
            opts = sandbox.options(cwd=cwd, env=env, hidden=hidden)
            opts += ["--ro-bind-data", str(passwd), "/etc/passwd"]
            opts += ["--ro-bind-data", str(group), "/etc/group"]
            opts += ["--bind-fd", str(workspace_fd), GUEST_WORKSPACE]
            opts += ["--remount-ro", "/", "--json-status-fd", str(status_write)]
            args = _memfd("args", b"".join(o.encode() + b"\0" for o in opts))
            ends.append(args)
        except BaseException:
            for fd in ends:
                os.close(fd)
            raise
        argv = [sandbox.bwrap, "--args", str(args), "--", *command]
        return cls(
            argv=argv,
            pass_fds=(args, passwd, group, status_write, workspace_fd),
            status_read=status_read,
            _child_ends=ends,
        )

    def started(self) -> None:
        """Close this process's copies of what only bwrap needs (call right after the spawn)."""
        for fd in self._child_ends:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._child_ends = []

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


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"reel-{name}", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _passwd() -> bytes:
    uid, gid = os.getuid(), os.getgid()
    lines = [f"root:x:0:0:root:{GUEST_WORKSPACE}:/usr/sbin/nologin"]
    if uid not in (0, 65534):
        lines.append(f"reel:x:{uid}:{gid}:reel:{GUEST_WORKSPACE}:/usr/sbin/nologin")
    lines.append("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin")
    return ("\n".join(lines) + "\n").encode()


def _group() -> bytes:
    gid = os.getgid()
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
) -> Sandbox | str:
    """A working `Sandbox`, or the reason there is none (one line, for ``reel tools``).

    Runs ``true`` in the real profile (strict user namespaces first, then without), once per
    distinct setting in this process.
    """
    return _probe(bwrap, search_path, network, tmp_bytes, tuple(sorted(set(hidden))))


@functools.lru_cache(maxsize=32)
def _probe(
    bwrap: str, search_path: str, network: bool, tmp_bytes: int, hidden: tuple[str, ...]
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
    version = _version(found)
    last = ""
    for userns in (_USERNS_STRICT, _USERNS_TRY):
        sandbox = Sandbox(
            bwrap=found,
            path_dirs=dirs,
            network=network,
            tmp_bytes=tmp_bytes,
            hidden=tuple(os.path.realpath(h) for h in hidden),
            userns=userns,
            version=version,
        )
        conflict = sandbox.conflicts()
        if conflict is not None:
            return conflict
        problem = _try(sandbox, true)
        if problem is None:
            return sandbox
        last = problem
    return f"bubblewrap cannot create its namespaces here: {last} (see docs/operations.md)"


def _version(bwrap: str) -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [bwrap, "--version"], capture_output=True, env={}, timeout=_PROBE_TIMEOUT_S
        )
        return done.stdout.decode("utf-8", "replace").strip()
    return ""


def _try(sandbox: Sandbox, true: str) -> str | None:
    """None if ``true`` ran in ``sandbox``; else bwrap's complaint."""
    with tempfile.TemporaryDirectory(prefix="reel-probe-") as tmp:
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            launch = Launch.prepare(
                sandbox,
                workspace_fd=fd,
                cwd=GUEST_WORKSPACE,
                env={"PATH": ":".join(sandbox.path_dirs)},
                command=[true],
            )
            try:
                done = subprocess.run(
                    launch.argv,
                    pass_fds=launch.pass_fds,
                    capture_output=True,
                    env={},
                    timeout=_PROBE_TIMEOUT_S,
                )
                launch.started()
                report = launch.status()
            finally:
                launch.close()
        except (OSError, subprocess.SubprocessError) as exc:
            return str(exc)
        finally:
            os.close(fd)
    if done.returncode == 0 and "child-pid" in report:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"bwrap exited with status {done.returncode}"
