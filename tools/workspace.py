"""Confinement of caller-supplied paths to the workspace directory.

Rules, in order:

1. The path is relative (absolute paths are refused) and has no NUL byte.
2. ``.`` and ``..`` are folded lexically; a ``..`` that would climb above the
   workspace root is refused.
3. Symlinks are resolved (`os.path.realpath`); if the result is not inside the
   real workspace, the path is refused. A link that stays inside is allowed.
4. The resolved path is then opened component by component from a descriptor
   of the workspace root with ``O_NOFOLLOW``, so a symlink swapped in between
   the check and the open (for any intermediate directory, or the final
   file) makes the open fail instead of escaping.

Hard links cannot be told apart from ordinary files; `open_for_write` refuses
files with more than one link so a planted hard link cannot redirect a write.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tools.result import Fault

__all__ = ["confine", "open_dir", "open_for_read", "open_for_write"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def confine(workspace: Path, path: str) -> tuple[str, ...]:
    """The components of ``path`` relative to the real workspace, symlinks resolved.

    Raises `Fault("denied")` naming the path when it is absolute, escapes via
    ``..`` or resolves (through a symlink) outside the workspace.
    """
    if "\x00" in path:
        raise Fault("denied", "path: contains a NUL byte")
    if path.startswith("/") or os.path.isabs(path):
        raise Fault("denied", f"path: {path!r} is absolute; use a path relative to the workspace")
    parts: list[str] = []
    for piece in path.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if not parts:
                raise Fault("denied", f"path: {path!r} escapes the workspace")
            parts.pop()
            continue
        parts.append(piece)
    root = os.path.realpath(workspace)
    full = os.path.realpath(os.path.join(root, *parts))
    if full != root and not full.startswith(root.rstrip("/") + "/"):
        raise Fault("denied", f"path: {path!r} resolves outside the workspace (symlink)")
    return Path(full).relative_to(root).parts


def _open_root(workspace: Path) -> int:
    try:
        return os.open(os.path.realpath(workspace), _DIR_FLAGS)
    except OSError as exc:
        raise Fault("failed", f"workspace is not usable: {exc.strerror}") from None


def _step(fd: int, name: str, shown: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise Fault("invalid", f"path: directory {shown!r} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Fault("denied", f"path: {shown!r} is not a plain directory") from None
        raise Fault("failed", f"path: {shown!r}: {exc.strerror}") from None
    with suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=fd)
    return _step(fd, name, shown, create=False)


@contextmanager
def open_dir(workspace: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """A descriptor of directory ``parts`` under the workspace, walked with O_NOFOLLOW."""
    fd = _open_root(workspace)
    try:
        for i, name in enumerate(parts):
            nxt = _step(fd, name, "/".join(parts[: i + 1]), create=create)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


@contextmanager
def open_for_read(workspace: Path, parts: tuple[str, ...], shown: str) -> Iterator[int]:
    """A read descriptor of the regular file ``parts`` (no symlink followed)."""
    if not parts:
        raise Fault("invalid", f"path: {shown!r} is the workspace directory, not a file")
    with open_dir(workspace, parts[:-1]) as dfd:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = _open_leaf(parts[-1], flags, dfd, shown)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Fault("invalid", f"path: {shown!r} is not a regular file")
        yield fd
    finally:
        os.close(fd)


@contextmanager
def open_for_write(
    workspace: Path, parts: tuple[str, ...], shown: str, *, create_dirs: bool
) -> Iterator[tuple[int, bool]]:
    """A truncated write descriptor of ``parts`` and whether the file was created."""
    if not parts:
        raise Fault("invalid", f"path: {shown!r} is the workspace directory, not a file")
    with open_dir(workspace, parts[:-1], create=create_dirs) as dfd:
        existed = _exists(parts[-1], dfd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = _open_leaf(parts[-1], flags, dfd, shown)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Fault("denied", f"path: {shown!r} is not a regular file")
        if st.st_nlink > 1:
            raise Fault("denied", f"path: {shown!r} has several hard links; refusing to write")
        os.ftruncate(fd, 0)
        yield fd, not existed
    finally:
        os.close(fd)


def _exists(name: str, dfd: int) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _open_leaf(name: str, flags: int, dfd: int, shown: str) -> int:
    try:
        return os.open(name, flags, 0o644, dir_fd=dfd)
    except FileNotFoundError:
        raise Fault("invalid", f"path: {shown!r} does not exist") from None
    except IsADirectoryError:
        raise Fault("invalid", f"path: {shown!r} is a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Fault("denied", f"path: {shown!r} is a symlink") from None
        raise Fault("failed", f"path: {shown!r}: {exc.strerror}") from None
