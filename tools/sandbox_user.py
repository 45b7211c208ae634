"""Who a sandboxed program is on the host: never root.

Inside bubblewrap's user namespace a program's uid is mapped to the uid that started bwrap.
When the node runs as root (containers, CI), that is host uid 0: the kernel then lets the
program write every root-owned file whose check is by mode only (``/proc/sys`` sysctls,
``/proc/sysrq-trigger``), whatever capabilities were dropped. So a root node starts bwrap as
an unprivileged host user instead (``[tools] shell_uid``/``shell_gid``, default 65534, the
``nobody`` of Debian), with no supplementary groups; bwrap then creates an unprivileged user
namespace and the program is that user on the host. A node that is not root runs the
sandbox as itself (it has no other uid to give).

bwrap resolves every bind source by path as the user it runs as, and the workspace usually
lies in the node's data dir (mode 0700): that user could not reach it. So between fork and
exec (`launcher`), still as root, the child enters a mount namespace of its own, mounts the
workspace on a stage directory (the very directory the node opened, checked by device and
inode), and only then drops to ``shell_uid:shell_gid`` and executes bwrap, which binds the
stage at ``/workspace``. The stage is an existing host directory that no bind source lies in
(`stage_for`: ``/tmp`` unless a ``shell_path`` directory is there); its content is hidden only
in that namespace. The host's mounts are never changed, and the namespace dies with the call.

The workspace must then be writable by that user. Before each call `adopt` gives it every
entry of the workspace that root owns (the node's own tools and the operator create files
as root): directories and regular files change to ``shell_uid`` (and ``shell_gid`` where
their group is root), modes stay. It never follows a symlink, never crosses into another
file system, and skips a file with more than one hard link: a second name may be outside
the workspace (``ln /etc/shadow workspace/x`` by someone on the host), and that file must
not change hands. Entries owned by anyone else are left alone (the sandbox can write them
only if their mode says so).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["SandboxUser", "adopt", "launcher", "sandbox_user", "stage_for"]

STAGES = ("/tmp", "/mnt", "/srv", "/media", "/opt", "/var", "/home")
"""Candidates for the directory `launcher` mounts the workspace on, in order of preference
(bwrap mounts its own root over ``/tmp``, and still finds the stage there under the old root).
"""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CLONE_NEWNS = 0x00020000
_MS_BIND = 0x1000
_MS_REC = 0x4000
_MS_PRIVATE = 0x40000
_libc = ctypes.CDLL(None, use_errno=True)
_unshare = _libc.unshare
_mount = _libc.mount
"""Looked up here, in the node: `launcher`'s steps run between fork and exec, where only
async-signal-safe calls are safe with other threads about, and a first ``_libc.mount`` there
would run ``dlsym`` (the dynamic loader's lock, which another thread may hold at the fork)."""


@dataclass(frozen=True, slots=True)
class SandboxUser:
    """The unprivileged host identity bwrap is started as (a root node only)."""

    uid: int
    gid: int


def sandbox_user(uid: int, gid: int) -> SandboxUser | None:
    """The identity to start bwrap as: ``uid:gid`` when this process is root, else None (the
    sandbox runs as the node's own, unprivileged, user). Raises ValueError for uid or gid 0."""
    if uid == 0 or gid == 0:
        raise ValueError("shell_uid and shell_gid must not be 0: the sandbox never runs as root")
    return SandboxUser(uid, gid) if os.geteuid() == 0 else None


def stage_for(sources: Iterable[str]) -> str | None:
    """The first of `STAGES` that exists and neither holds nor lies in a bind source (a real
    path bwrap must still find), or None."""
    real = [os.path.realpath(s) for s in sources]
    for stage in STAGES:
        if not os.path.isdir(stage) or os.path.islink(stage):
            continue
        if not any(_related(stage, source) for source in real):
            return stage
    return None


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def launcher(
    user: SandboxUser, workspace_fd: int, stage: str, report_fd: int
) -> Callable[[], None]:
    """The steps a root node's child takes between fork and exec of bwrap (see the module
    docstring); ``workspace_fd`` is closed by them, so the program never inherits it.

    Like the rlimits in `tools.shell`, this runs in ``preexec_fn``: only system calls, no
    Python-level lock is taken. A failure is written to ``report_fd`` as one JSON line
    (``{"launcher-error": "..."}``, beside bwrap's own reports) and raised, which fails the
    spawn.
    """

    def enter() -> None:
        try:
            _enter()
        except OSError as exc:
            line = json.dumps({"launcher-error": str(exc)}) + "\n"
            with contextlib.suppress(OSError):
                os.write(report_fd, line.encode())
            raise

    def _enter() -> None:
        _check(_unshare(_CLONE_NEWNS), "unshare")
        _check(_mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
        # A descriptor from the node's mount namespace cannot be bind-mounted here: open the
        # same path in this namespace and prove it is the same directory.
        path = os.readlink(f"/proc/self/fd/{workspace_fd}")
        here = os.open(path, _DIR_FLAGS)
        try:
            want, got = os.fstat(workspace_fd), os.fstat(here)
            if (want.st_dev, want.st_ino) != (got.st_dev, got.st_ino):
                raise OSError(f"the workspace moved while the sandbox started: {path}")
            source = f"/proc/self/fd/{here}".encode()
            _check(_mount(source, stage.encode(), None, _MS_BIND, None), "bind")
        finally:
            os.close(here)
            os.close(workspace_fd)
        os.setgroups([])
        os.setresgid(user.gid, user.gid, user.gid)
        os.setresuid(user.uid, user.uid, user.uid)

    return enter


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"sandbox launcher: {what}: {os.strerror(errno)}")


def adopt(root_fd: int, user: SandboxUser) -> int:
    """Give ``user`` every root-owned entry under the directory ``root_fd`` (itself included);
    the number of entries changed. Races with a concurrent sandbox are harmless: every step is
    relative to a descriptor opened without following symlinks, and ownership of a symlink
    itself is changed, never of its target."""
    changed = _own(root_fd, None, os.fstat(root_fd), user)
    device = os.fstat(root_fd).st_dev
    pending = [os.dup(root_fd)]
    try:
        while pending:
            fd = pending.pop()
            try:
                with os.scandir(fd) as entries:
                    names = [e.name for e in entries]
                for name in names:
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue  # gone meanwhile
                    if st.st_dev != device:
                        continue  # a mount point: another file system is not ours to change
                    changed += _own(fd, name, st, user)
                    if stat.S_ISDIR(st.st_mode):
                        with contextlib.suppress(OSError):
                            pending.append(os.open(name, _DIR_FLAGS, dir_fd=fd))
            finally:
                os.close(fd)
    finally:
        for fd in pending:
            os.close(fd)
    return changed


def _own(fd: int, name: str | None, st: os.stat_result, user: SandboxUser) -> int:
    """Change a root-owned directory or single-link regular file; 1 if changed. The file is
    opened (``O_PATH``, no symlink followed) and checked on that descriptor, and the change
    goes through it, so a name swapped after the check changes nothing else."""
    if st.st_uid != 0 or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return 0
    if name is None:
        target = os.dup(fd)
    else:
        try:
            target = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            return 0
    try:
        now = os.fstat(target)
        if now.st_uid != 0 or (stat.S_ISREG(now.st_mode) and now.st_nlink != 1):
            return 0  # another name for this file may lie outside the workspace
        if not (stat.S_ISDIR(now.st_mode) or stat.S_ISREG(now.st_mode)):
            return 0
        gid = user.gid if now.st_gid == 0 else -1
        os.chown(f"/proc/self/fd/{target}", user.uid, gid)
    except OSError:
        return 0
    finally:
        os.close(target)
    return 1
