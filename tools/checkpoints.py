"""Workspace checkpoints: content-addressed snapshots of the files a mutating call changed.

Around every call of a tool that may write (capability ``fs.write`` or ``process.exec``), the
catalog takes a `TreeSnapshot` of the files the call may touch (the paths its runtime names, or
the whole workspace tree when it cannot say, as for ``shell.run``), runs the call, and
compares: the `FileChange` list (path, SHA-256 before, SHA-256 after; ``None`` when absent) is
what the tool actor records as ``workspace.checkpointed``. The content of every version
snapshotted is kept in the `BlobStore` (``<data>/checkpoints/sha256/xx/<hex>``, written once
per content), so a restore can put any recorded version back.

The walk follows what `tools.workspace` allows a tool to read: regular files with one link,
reached without following any symlink; others are not snapshotted. A tree walk stops at
``checkpoint_scan_max_files`` files (the checkpoint then says ``complete: false``), and a file
larger than ``checkpoint_file_max_bytes`` is hashed but not stored (a restore of it refuses).

Retention: the store holds at most ``checkpoint_blob_max_bytes``; past it, the least recently
used blobs are deleted (never one the current checkpoint refers to) and their hashes returned,
for the actor to record as ``workspace.blobs_pruned``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.errors import ToolsError
from tools.result import FileChange, Pruned, ToolFault, WorkspaceChanges
from tools.workspace import confine, open_for_read, open_for_write, open_root, remove

__all__ = ["WRITES", "BlobStore", "Checkpointer", "StoreFault", "TreeSnapshot"]

WRITES = frozenset({"fs.write", "process.exec"})
"""Capabilities that make a call checkpointed."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class StoreFault(ToolsError):
    """A blob cannot be given back: missing (pruned, deleted) or not what its name says."""


@dataclass
class TreeSnapshot:
    """The hashes of the files in scope at one moment; ``paths`` None: the whole tree."""

    paths: tuple[str, ...] | None
    files: dict[str, str | None]
    complete: bool = True


class BlobStore:
    """Content-addressed blobs under ``root``, bounded to ``max_bytes`` by LRU pruning."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._known: set[str] = set()
        """Digests known to be stored (put, or seen): a tree walk asks for every file."""
        self._total: int | None = None
        """The store's size as last counted plus what was put since (None: not counted yet);
        the directory is listed only when this passes the bound."""

    def path_of(self, digest: str) -> Path:
        return self.root / "sha256" / digest[:2] / digest

    def put(self, digest: str, data: bytes) -> None:
        """Keep ``data`` under its ``digest`` (once; a second put only marks it used)."""
        target = self.path_of(digest)
        with self._lock:
            if target.exists():
                os.utime(target)
                self._known.add(digest)
                return
            for folder in (self.root, target.parent.parent, target.parent):
                folder.mkdir(exist_ok=True, mode=0o700)
            tmp = target.with_name(f".{digest}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            os.chmod(tmp, 0o600)
            os.replace(tmp, target)
            self._known.add(digest)
            if self._total is not None:
                self._total += len(data)

    def get(self, digest: str) -> bytes:
        """The content of ``digest``; raises `StoreFault` when missing or altered."""
        try:
            data = self.path_of(digest).read_bytes()
        except FileNotFoundError:
            raise StoreFault(
                f"blob {digest} is not in the checkpoint store (pruned or deleted)"
            ) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise StoreFault(f"blob {digest} in the checkpoint store does not match its hash")
        return data

    def has(self, digest: str) -> bool:
        """Whether ``digest`` is stored (as far as this process knows: one deleted behind its
        back is found missing when read)."""
        if digest in self._known:
            return True
        if self.path_of(digest).is_file():
            self._known.add(digest)
            return True
        return False

    def prune(self, keep: Iterable[str]) -> Pruned | None:
        """Delete least recently used blobs until the store fits ``max_bytes``, sparing
        ``keep``; None when nothing was deleted."""
        spared = set(keep)
        with self._lock:
            if self._total is not None and self._total <= self.max_bytes:
                return None
            blobs: list[tuple[float, int, Path]] = []
            total = 0
            for path in (self.root / "sha256").glob("*/*"):
                if path.name.startswith("."):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = path.stat()
                    blobs.append((st.st_mtime, st.st_size, path))
                    total += st.st_size
            self._total = total
            if total <= self.max_bytes:
                return None
            gone: list[str] = []
            freed = 0
            for _, size, path in sorted(blobs):
                if total - freed <= self.max_bytes:
                    break
                if path.name in spared:
                    continue
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                self._known.discard(path.name)
                gone.append(path.name)
                freed += size
            self._total = total - freed
        return Pruned(blobs=tuple(sorted(gone)), freed_bytes=freed) if gone else None


@dataclass
class Checkpointer:
    """Snapshots before and after a call, and the restore of recorded versions."""

    store: BlobStore
    scan_max_files: int
    file_max_bytes: int
    history: Callable[[str], Mapping[str, Any]] | None = None
    """What changed since a checkpoint, as JSON-ready data (``fs.diff``): the node binds it
    to its journal once open (actors/checkpoints.py ``history_of``); raises `ToolFault`."""
    _seen: dict[tuple[int, int, int, int, int], str] = field(default_factory=dict)
    """(dev, ino, size, mtime_ns, ctime_ns) -> digest: a tree walk rehashes only what moved."""

    def snapshot(self, workspace: Path, paths: tuple[str, ...] | None) -> TreeSnapshot:
        """The scope's files now, their contents kept in the store."""
        if paths is not None:
            files: dict[str, str | None] = {}
            for path in paths:
                files[path] = self._file(workspace, path)
            return TreeSnapshot(paths=paths, files=files)
        files, complete = self._tree(workspace)
        return TreeSnapshot(paths=None, files=files, complete=complete)

    def changes(self, workspace: Path, before: TreeSnapshot) -> WorkspaceChanges | None:
        """What changed in ``before``'s scope since it was taken (sorted by path), and what
        retention pruned to make room; None when nothing changed."""
        after = self.snapshot(workspace, before.paths)
        names = sorted(set(before.files) | set(after.files))
        files = tuple(
            FileChange(path=p, before=before.files.get(p), after=after.files.get(p))
            for p in names
            if before.files.get(p) != after.files.get(p)
        )
        if not files:
            return None
        used = {h for f in files for h in (f.before, f.after) if h is not None}
        return WorkspaceChanges(
            files=files,
            complete=before.complete and after.complete,
            pruned=self.store.prune(used),
        )

    def restore(self, workspace: Path, targets: Mapping[str, str | None]) -> None:
        """Put each path back to the content ``targets`` names (None: delete it). Every blob is
        read (and checked) before anything is written; raises `StoreFault` naming the path
        whose version is gone, or `ToolFault` from the workspace's checks."""
        contents: dict[str, bytes | None] = {}
        for path, digest in sorted(targets.items()):
            if digest is None:
                contents[path] = None
                continue
            try:
                contents[path] = self.store.get(digest)
            except StoreFault as exc:
                raise StoreFault(f"{path}: {exc}; nothing was restored") from None
        for path, data in contents.items():
            parts = confine(workspace, path)
            if data is None:
                remove(workspace, parts, path)
                continue
            with open_for_write(workspace, parts, path, create_dirs=True) as (fd, _):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]

    # --- reading -------------------------------------------------------------------------

    def _file(self, workspace: Path, path: str) -> str | None:
        try:
            parts = confine(workspace, path)
            with open_for_read(workspace, parts, path) as fd:
                return self._keep(fd, os.fstat(fd))
        except ToolFault:
            return None

    def _tree(self, workspace: Path) -> tuple[dict[str, str | None], bool]:
        files: dict[str, str | None] = {}
        try:
            root = open_root(workspace)
        except ToolFault:
            return files, True
        stack: list[tuple[int, str]] = [(root, "")]
        complete = True
        try:
            while stack:
                fd, where = stack.pop()
                try:
                    with os.scandir(fd) as it:
                        entries = list(it)
                    for entry in sorted(entries, key=lambda e: e.name):
                        rel = f"{where}{entry.name}"
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            with contextlib.suppress(OSError):
                                stack.append(
                                    (os.open(entry.name, _DIR_FLAGS, dir_fd=fd), f"{rel}/")
                                )
                        elif stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                            if len(files) >= self.scan_max_files:
                                complete = False
                                continue
                            files[rel] = self._read_at(fd, entry.name, st)
                finally:
                    os.close(fd)
        finally:
            for fd, _ in stack:
                os.close(fd)
        return files, complete

    def _read_at(self, dfd: int, name: str, st: os.stat_result) -> str | None:
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        known = self._seen.get(key)
        if known is not None and (st.st_size > self.file_max_bytes or self.store.has(known)):
            return known
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
        except OSError:
            return None
        try:
            now = os.fstat(fd)
            if not stat.S_ISREG(now.st_mode) or now.st_nlink != 1:
                return None
            return self._keep(fd, now)
        finally:
            os.close(fd)

    def _keep(self, fd: int, st: os.stat_result) -> str:
        """Hash the open file (and store it when small enough); remember its digest."""
        digest = hashlib.sha256()
        chunks: list[bytes] = []
        keep = st.st_size <= self.file_max_bytes
        while chunk := os.read(fd, 1 << 16):
            digest.update(chunk)
            if keep:
                chunks.append(chunk)
        hexed = digest.hexdigest()
        if keep and sum(map(len, chunks)) <= self.file_max_bytes:
            self.store.put(hexed, b"".join(chunks))
        if len(self._seen) > 100_000:
            self._seen.clear()
        self._seen[(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)] = hexed
        return hexed
