"""Confinement of caller-supplied paths to the workspace directory.

Rules, in order:

1. The path is relative (absolute paths are refused) and has no NUL byte.
2. ``.`` and ``..`` are folded lexically; a ``..`` that would climb above the workspace
   root is refused. Lexical folding is sound because of rule 3: no component is ever a
   symlink, so ``a/..`` is the directory the walk started from.
3. Symlinks are never followed, anywhere. The path is opened component by component from a
   descriptor of the workspace root, every step with ``O_NOFOLLOW`` (``openat`` relative to
   the previous directory's descriptor), so a symlink — present from the start or swapped
   in at any moment (TOCTOU), at the file or at any intermediate directory, pointing outside
   or inside, ``/proc/self/root`` included — makes the open fail instead of escaping.
4. A file is read or written only if it is a regular file with exactly one link
   (``st_nlink == 1``, checked with ``fstat`` on the opened descriptor, which is the file
   that will be used). A second hard link may be a name outside the workspace for the same
   inode (``ln ~/.ssh/id_rsa workspace/x``), and a link count cannot say where the other
   name lives, so every multi-link file is refused. Before opening, ``fstatat`` without
   following checks the entry is a regular file, so a FIFO or device is never opened.

`scan_tree` applies rules 3 and 4 to a whole directory tree, for the WASM runtime, which
hands a directory to wasmtime and cannot check each open itself.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tools.result import ToolFault

__all__ = ["confine", "open_dir", "open_for_read", "open_for_write", "remove", "scan_tree"]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_FOLLOW = "symlinks are not followed"


def confine(workspace: Path, path: str) -> tuple[str, ...]:
    """The components of ``path`` relative to the workspace, ``.`` and ``..`` folded.

    Raises `ToolFault("denied")` naming the path when it is absolute or escapes via ``..``.
    Symlinks are not looked at here: the open that follows refuses every one of them.
    """
    if "\x00" in path:
        raise ToolFault("denied", "path: contains a NUL byte")
    if path.startswith("/") or os.path.isabs(path):
        raise ToolFault(
            "denied", f"path: {path!r} is absolute; use a path relative to the workspace"
        )
    parts: list[str] = []
    for piece in path.split("/"):
        if piece in ("", "."):
            continue
        if piece == "..":
            if not parts:
                raise ToolFault("denied", f"path: {path!r} escapes the workspace")
            parts.pop()
            continue
        parts.append(piece)
    return tuple(parts)


def open_root(workspace: Path) -> int:
    """A descriptor of the workspace directory itself (the node's path; its last component
    must not be a symlink)."""
    try:
        return os.open(os.path.realpath(workspace), _DIR_FLAGS)
    except OSError as exc:
        raise ToolFault("failed", f"workspace is not usable: {exc.strerror}") from None


def _step(fd: int, name: str, shown: str, *, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise ToolFault("invalid", f"path: directory {shown!r} does not exist") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ToolFault(
                "denied", f"path: {shown!r} is not a plain directory (symlink?)"
            ) from None
        raise ToolFault("failed", f"path: {shown!r}: {exc.strerror}") from None
    with suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=fd)
    return _step(fd, name, shown, create=False)


@contextmanager
def open_dir(workspace: Path, parts: tuple[str, ...], *, create: bool = False) -> Iterator[int]:
    """A descriptor of directory ``parts`` under the workspace, walked with O_NOFOLLOW."""
    fd = open_root(workspace)
    try:
        for i, name in enumerate(parts):
            nxt = _step(fd, name, "/".join(parts[: i + 1]), create=create)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def _lstat(name: str, dfd: int) -> os.stat_result | None:
    """The entry ``name`` in ``dfd`` without following it; None if it does not exist."""
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _single_link(st: os.stat_result, shown: str) -> None:
    if st.st_nlink > 1:
        raise ToolFault(
            "denied",
            f"path: {shown!r} has {st.st_nlink} hard links; a file with another name may "
            "also live outside the workspace, so it is refused",
        )


@contextmanager
def open_for_read(workspace: Path, parts: tuple[str, ...], shown: str) -> Iterator[int]:
    """A read descriptor of the regular, single-link file ``parts`` (no symlink followed)."""
    if not parts:
        raise ToolFault("invalid", f"path: {shown!r} is the workspace directory, not a file")
    with open_dir(workspace, parts[:-1]) as dfd:
        before = _lstat(parts[-1], dfd)
        if before is None:
            raise ToolFault("invalid", f"path: {shown!r} does not exist")
        _check_entry(before, shown)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = _open_leaf(parts[-1], flags, dfd, shown)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolFault("invalid", f"path: {shown!r} is not a regular file")
        _single_link(st, shown)
        yield fd
    finally:
        os.close(fd)


def _check_entry(st: os.stat_result, shown: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise ToolFault("denied", f"path: {shown!r} is a symlink; {_NO_FOLLOW}")
    if stat.S_ISDIR(st.st_mode):
        raise ToolFault("invalid", f"path: {shown!r} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ToolFault("invalid", f"path: {shown!r} is not a regular file")


@contextmanager
def open_for_write(
    workspace: Path, parts: tuple[str, ...], shown: str, *, create_dirs: bool
) -> Iterator[tuple[int, bool]]:
    """A truncated write descriptor of ``parts`` and whether the file was created."""
    if not parts:
        raise ToolFault("invalid", f"path: {shown!r} is the workspace directory, not a file")
    with open_dir(workspace, parts[:-1], create=create_dirs) as dfd:
        before = _lstat(parts[-1], dfd)
        if before is not None:
            _check_entry(before, shown)
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = _open_leaf(parts[-1], flags, dfd, shown)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolFault("denied", f"path: {shown!r} is not a regular file")
        _single_link(st, shown)
        os.ftruncate(fd, 0)
        yield fd, before is None
    finally:
        os.close(fd)


def remove(workspace: Path, parts: tuple[str, ...], shown: str) -> bool:
    """Delete the file ``parts`` once `open_for_read` vouches for it (regular, one link, no
    symlink on the way); False when it (or its directory) does not exist."""
    try:
        with open_dir(workspace, parts[:-1]) as dfd:
            if _lstat(parts[-1], dfd) is None:
                return False
            with open_for_read(workspace, parts, shown):
                os.unlink(parts[-1], dir_fd=dfd)
    except ToolFault as fault:
        if fault.kind == "invalid" and "does not exist" in fault.message:
            return False
        raise
    return True


def _open_leaf(name: str, flags: int, dfd: int, shown: str) -> int:
    try:
        return os.open(name, flags, 0o644, dir_fd=dfd)
    except FileNotFoundError:
        raise ToolFault("invalid", f"path: {shown!r} does not exist") from None
    except IsADirectoryError:
        raise ToolFault("invalid", f"path: {shown!r} is a directory") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolFault("denied", f"path: {shown!r} is a symlink; {_NO_FOLLOW}") from None
        raise ToolFault("failed", f"path: {shown!r}: {exc.strerror}") from None


def scan_tree(root_fd: int, max_entries: int, shown: str) -> None:
    """Refuse (`ToolFault("denied")`) a tree that holds a way out, walking from ``root_fd``.

    A way out is a regular file with more than one link, a symlink whose target is absolute
    or contains ``..``, or a device node. Directories are opened with
    O_NOFOLLOW from their parent's descriptor, so the walk itself never leaves the tree.
    More than ``max_entries`` entries is refused too (a scan must stay bounded), and so is an
    entry that changes under the walk (gone or replaced between the listing and its look).
    """
    seen = 0
    stack: list[tuple[int, tuple[str, ...]]] = [(os.dup(root_fd), ())]
    try:
        while stack:
            fd, where = stack.pop()
            try:
                with os.scandir(fd) as it:
                    entries = list(it)
                for entry in entries:
                    seen += 1
                    if seen > max_entries:
                        raise ToolFault(
                            "denied",
                            f"{shown}: more than {max_entries} entries to vet for links; "
                            "refusing to preopen it",
                        )
                    rel = "/".join((*where, entry.name))
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError as exc:  # gone or replaced since the listing
                        raise _changed(f"{shown}/{rel}", exc) from None
                    if stat.S_ISDIR(st.st_mode):
                        try:
                            child = os.open(entry.name, _DIR_FLAGS, dir_fd=fd)
                        except OSError as exc:
                            raise ToolFault("denied", f"{shown}/{rel}: {exc.strerror}") from None
                        stack.append((child, (*where, entry.name)))
                    elif stat.S_ISLNK(st.st_mode):
                        try:
                            target = os.readlink(entry.name, dir_fd=fd)
                        except OSError as exc:
                            raise _changed(f"{shown}/{rel}", exc) from None
                        if _leaves(target):
                            raise ToolFault(
                                "denied",
                                f"{shown}/{rel}: symlink to {target!r} may point outside the grant",
                            )
                    elif stat.S_ISREG(st.st_mode):
                        if st.st_nlink > 1:
                            raise ToolFault(
                                "denied",
                                f"{shown}/{rel}: has {st.st_nlink} hard links (another name "
                                "may be outside the grant)",
                            )
                    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                        raise ToolFault("denied", f"{shown}/{rel}: is a device node")
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)


def _changed(shown: str, exc: OSError) -> ToolFault:
    """The refusal when an entry changes under the scan: the tree cannot be vouched for."""
    return ToolFault(
        "denied",
        f"{shown}: changed while it was being vetted ({exc.strerror}); refusing to preopen it",
    )


def _leaves(target: str) -> bool:
    """Whether a symlink's ``target`` may resolve outside the tree: absolute, or with any
    ``..`` (judging ``..`` by depth alone is unsound once links chain: ``d/z -> y/..``
    with ``d/y -> ..`` climbs out although each looks inside)."""
    return target.startswith("/") or ".." in target.split("/")
