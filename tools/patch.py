"""``fs.apply_patch``: a unified diff applied to workspace files, all hunks or none.

The diff is parsed by ``unidiff``; every file it names is confined by `tools.workspace`
(relative, no ``..`` above the root, no symlink anywhere on the path, a regular file with one
link), read, and patched in memory. Only when every hunk of every file applies is anything
written, each file through `tools.workspace.open_for_write`; should a write still fail (a file
swapped for a symlink meanwhile), the files already written get their old content back.

A hunk applies where its context and removed lines match exactly: at the line it names
(shifted by what earlier hunks of the file added or removed), else at the nearest line that
matches, never before the end of the previous hunk. A hunk that matches nowhere fails the
call with a ``failed`` fault naming it (``hunk 2 (the 1st of b.txt, @@ -4,3 +4,4 @@)``).
Renames and binary patches are refused; ``--- /dev/null`` creates a file (and its missing
directories), ``+++ /dev/null`` deletes one.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tools.result import ToolFault
from tools.workspace import confine, open_dir, open_for_read, open_for_write, remove

if TYPE_CHECKING:
    from unidiff.patch import Hunk, PatchedFile

__all__ = ["FileEdit", "apply_edits", "parse", "plan", "touched_paths"]

_NULL = "/dev/null"


@dataclass(frozen=True, slots=True)
class FileEdit:
    """What a patch does to one file: ``before`` is None for a created file, ``after`` None
    for a deleted one."""

    path: str
    parts: tuple[str, ...]
    before: bytes | None
    after: bytes | None


def parse(diff: str) -> list[PatchedFile]:
    """The files of ``diff``; `ToolFault("invalid")` naming the problem when it is no unified
    diff, is empty, renames a file or is binary. ``unidiff`` is imported here, by the first patch:
    every command that builds the tool catalog imports this module, and none of them needs it."""
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        files = list(PatchSet(diff))
    except UnidiffParseError as exc:
        raise ToolFault("invalid", f"patch: not a unified diff: {exc}") from None
    if not files:
        raise ToolFault("invalid", "patch: holds no file (no '--- ' / '+++ ' header)")
    seen: set[str] = set()
    for pf in files:
        if pf.is_binary_file:
            raise ToolFault("invalid", f"patch: {pf.path!r} is a binary patch")
        source, target = _strip(pf.source_file), _strip(pf.target_file)
        if _NULL not in (source, target) and source != target:
            raise ToolFault("invalid", f"patch: renames {source!r} to {target!r}; not supported")
        if pf.path in seen:
            raise ToolFault("invalid", f"patch: names {pf.path!r} twice")
        seen.add(pf.path)
    return files


def touched_paths(diff: str) -> tuple[str, ...]:
    """The workspace paths a patch would change (empty when it does not parse)."""
    try:
        return tuple(pf.path for pf in parse(diff))
    except ToolFault:
        return ()


def plan(workspace: Path, diff: str, size_cap: int) -> list[FileEdit]:
    """Every file's edit, computed in memory; raises `ToolFault` before anything is written."""
    edits: list[FileEdit] = []
    number = 0
    for pf in parse(diff):
        parts = confine(workspace, pf.path)
        before = None if pf.is_added_file else _read(workspace, parts, pf.path)
        if pf.is_added_file and _exists(workspace, parts):
            raise ToolFault("failed", f"patch: {pf.path!r} already exists; the patch creates it")
        text = "" if before is None else _text(before, pf.path)
        lines = text.splitlines(keepends=True)
        offset = 0
        floor = 0
        for i, hunk in enumerate(pf, start=1):
            number += 1
            source, target = _sides(hunk)
            at = _locate(lines, source, hunk.source_start - 1 + offset, floor)
            if at is None:
                raise ToolFault(
                    "failed",
                    f"hunk {number} ({_ordinal(i)} of {pf.path}, @@ -{hunk.source_start},"
                    f"{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@) does "
                    "not apply: its context and removed lines are not in the file; "
                    "nothing was changed",
                )
            lines[at : at + len(source)] = target
            floor = at + len(target)
            offset += len(target) - len(source)
        after = None if pf.is_removed_file else "".join(lines).encode("utf-8")
        if after is not None and len(after) > size_cap:
            raise ToolFault(
                "limit", f"patch: {pf.path!r} would be {len(after)} bytes; the cap is {size_cap}"
            )
        edits.append(FileEdit(path=pf.path, parts=parts, before=before, after=after))
    return edits


def apply_edits(workspace: Path, edits: list[FileEdit]) -> None:
    """Write (or delete) every edit; on a failure, put back the ones already done, re-raise."""
    done: list[FileEdit] = []
    try:
        for edit in edits:
            _put(workspace, edit.parts, edit.path, edit.after)
            done.append(edit)
    except BaseException:
        for edit in reversed(done):
            with contextlib.suppress(ToolFault):  # the first fault is the one reported
                _put(workspace, edit.parts, edit.path, edit.before)
        raise


def _put(workspace: Path, parts: tuple[str, ...], shown: str, data: bytes | None) -> None:
    if data is None:
        remove(workspace, parts, shown)
        return
    with open_for_write(workspace, parts, shown, create_dirs=True) as (fd, _):
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def _read(workspace: Path, parts: tuple[str, ...], shown: str) -> bytes:
    chunks: list[bytes] = []
    with open_for_read(workspace, parts, shown) as fd:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def _exists(workspace: Path, parts: tuple[str, ...]) -> bool:
    try:
        with open_dir(workspace, parts[:-1]) as dfd:
            os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
    except (ToolFault, FileNotFoundError):
        return False
    return True


def _text(data: bytes, shown: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolFault("invalid", f"patch: {shown!r} is not UTF-8 text") from None


def _sides(hunk: Hunk) -> tuple[list[str], list[str]]:
    """The hunk's old lines (context and removed) and new lines (context and added); a
    ``\\ No newline at end of file`` marker strips the newline of the line before it."""
    source: list[str] = []
    target: list[str] = []
    last = ""
    for line in hunk:
        kind = line.line_type
        if kind == "\\":
            for side, applies in ((source, last in " -"), (target, last in " +")):
                if applies and side:
                    side[-1] = side[-1].removesuffix("\n")
            continue
        last = kind
        if kind in " -":
            source.append(line.value)
        if kind in " +":
            target.append(line.value)
    return source, target


def _locate(lines: list[str], source: list[str], expected: int, floor: int) -> int | None:
    """Where ``source`` occurs in ``lines`` at or after ``floor``, nearest ``expected`` first."""
    size = len(source)
    last = len(lines) - size
    if size == 0:
        return min(max(expected + 1 if expected >= 0 else 0, floor), len(lines))
    start = min(max(expected, floor), max(last, floor))
    for distance in range(0, len(lines) + 1):
        for at in (start - distance, start + distance) if distance else (start,):
            if floor <= at <= last and lines[at : at + size] == source:
                return at
    return None


def _strip(name: str) -> str:
    return name[2:] if name[:2] in ("a/", "b/") else name


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"the {n}{suffix}"
