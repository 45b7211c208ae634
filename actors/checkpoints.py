"""Workspace checkpoints on the journal: recording one, the list, a diff since one, a restore.

A checkpoint is a ``workspace.checkpointed`` event on its own stream ``workspace/<id>``
(tools/checkpoints.py takes the snapshots and keeps the blobs). The list is folded from the
journal by kind, in journal order; nothing else holds a copy.

Restoring checkpoint X puts every file that a later checkpoint changed back to its content
right after X (``before=True``: right before X, which also undoes X itself). The restore is a
checkpoint of its own (``restored`` names X), so it can be restored in turn. Every version it
needs is read from the store before anything is written: a missing one refuses the whole
restore, naming the file (:class:`CheckpointUnrestorable`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from actors.errors import CheckpointUnrestorable, UnknownCheckpoint
from actors.stream import OwnedStream
from events import JournalPort, new_id
from events.catalog import WORKSPACE_KINDS, Event, WorkspaceBlobsPruned, WorkspaceCheckpointed
from events.envelope import StoredEvent
from tools.checkpoints import Checkpointer, StoreFault
from tools.result import FileChange, ToolFault, WorkspaceChanges

__all__ = [
    "DiffEntry",
    "WorkspaceCheckpoint",
    "WorkspaceDiff",
    "diff_since",
    "list_checkpoints",
    "record",
    "restore",
]


class KindReader(Protocol):
    """What listing needs of a journal (a running node's, or a reader of a stopped one)."""

    def events_of_kinds(
        self, kinds: tuple[str, ...], after_position: int = 0
    ) -> list[StoredEvent]: ...


DIFF_MAX_CHARS = 64 * 1024
"""The longest unified diff text one file's entry carries (cut past it, ``cut`` set)."""


class WorkspaceCheckpoint(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded checkpoint, as listed."""

    checkpoint_id: str
    position: int
    recorded_at_ms: int
    principal: str
    files: tuple[FileChange, ...]
    complete: bool = True
    tool: str | None = None
    invocation_id: str | None = None
    run_id: str | None = None
    session_id: str | None = None
    restored: str | None = None
    restored_before: bool = False


class DiffEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One file changed since a checkpoint: its hash then (``at``) and now; ``diff`` is the
    unified diff when both versions are kept and are text."""

    path: str
    at: str | None
    now: str | None
    diff: str | None = None
    cut: bool = False


class WorkspaceDiff(msgspec.Struct, frozen=True, kw_only=True):
    since: str
    files: tuple[DiffEntry, ...]


def record(
    journal: JournalPort,
    changes: WorkspaceChanges,
    *,
    principal: str,
    correlation_id: str | None = None,
    causation_id: str | None = None,
    **about: str | bool | None,
) -> str:
    """Append ``workspace.checkpointed`` (and ``workspace.blobs_pruned`` when retention
    deleted blobs) on a new stream; returns the checkpoint's id. ``about``: the event's
    optional fields (tool, invocation_id, run_id, session_id, restored, restored_before)."""
    checkpoint_id = new_id()
    events: list[Event] = [
        WorkspaceCheckpointed(
            checkpoint_id=checkpoint_id,
            files=part,
            complete=changes.complete,
            **about,  # type: ignore[arg-type]
        )
        for part in _parts(changes.files)
    ]
    if changes.pruned is not None:
        events.append(
            WorkspaceBlobsPruned(
                checkpoint_id=checkpoint_id,
                blobs=changes.pruned.blobs,
                freed_bytes=changes.pruned.freed_bytes,
            )
        )
    OwnedStream(
        journal,
        f"workspace/{checkpoint_id}",
        principal=principal,
        correlation_id=correlation_id,
        causation_id=causation_id,
        home=session if isinstance(session := about.get("session_id"), str) else None,
    ).append(0, *events)
    return checkpoint_id


def list_checkpoints(journal: KindReader) -> list[WorkspaceCheckpoint]:
    """Every checkpoint, oldest first (the parts of one recorded in several events joined)."""
    found: list[WorkspaceCheckpoint] = []
    for stored in _stored(journal):
        if stored.kind != _CHECKPOINTED:
            continue
        cp = _checkpoint(stored)
        if found and found[-1].checkpoint_id == cp.checkpoint_id:
            first = found.pop()
            cp = msgspec.structs.replace(first, files=first.files + cp.files)
        found.append(cp)
    return found


def diff_since(
    journal: KindReader, checkpointer: Checkpointer, checkpoint_id: str
) -> WorkspaceDiff:
    """What changed in the workspace since checkpoint ``checkpoint_id``, by later checkpoints
    (files changed and changed back are left out)."""
    all_ = list_checkpoints(journal)
    later = all_[_index(all_, checkpoint_id) + 1 :]
    at: dict[str, str | None] = {}
    now: dict[str, str | None] = {}
    for cp in later:
        for f in cp.files:
            at.setdefault(f.path, f.before)
            now[f.path] = f.after
    entries = [
        _entry(checkpointer, path, at[path], now[path])
        for path in sorted(at)
        if at[path] != now[path]
    ]
    return WorkspaceDiff(since=checkpoint_id, files=tuple(entries))


def history_of(journal: KindReader, checkpointer: Checkpointer) -> Callable[[str], dict[str, Any]]:
    """The ``fs.diff`` tool's view of the journal: :func:`diff_since` as JSON-ready data, an
    unknown checkpoint a tool fault naming it."""

    def since(checkpoint_id: str) -> dict[str, Any]:
        try:
            found = diff_since(journal, checkpointer, checkpoint_id)
        except UnknownCheckpoint as exc:
            raise ToolFault("invalid", f"since: {exc}") from None
        result: dict[str, Any] = msgspec.to_builtins(found)
        return result

    return since


def restore(
    journal: JournalPort,
    checkpointer: Checkpointer,
    workspace: Path,
    checkpoint_id: str,
    *,
    before: bool,
    principal: str,
) -> WorkspaceCheckpoint:
    """Put the workspace back to checkpoint ``checkpoint_id`` and record it; returns the new
    checkpoint. Raises :class:`UnknownCheckpoint`, or :class:`CheckpointUnrestorable` with
    nothing written."""
    all_ = list_checkpoints(journal)
    index = _index(all_, checkpoint_id)
    targets: dict[str, str | None] = {}
    for cp in all_[index if before else index + 1 :]:
        for f in cp.files:
            targets.setdefault(f.path, f.before)
    snap = checkpointer.snapshot(workspace, tuple(sorted(targets)))
    wanted = {p: h for p, h in targets.items() if snap.files.get(p) != h}
    try:
        checkpointer.restore(workspace, wanted)
    except StoreFault as exc:  # found before anything was written
        raise CheckpointUnrestorable(str(exc)) from None
    except ToolFault as exc:  # a write refused midway: put back what was written
        with contextlib.suppress(StoreFault, ToolFault):
            checkpointer.restore(workspace, {p: snap.files.get(p) for p in wanted})
        raise CheckpointUnrestorable(f"{exc.message}; nothing was restored") from None
    changes = checkpointer.changes(workspace, snap) or WorkspaceChanges(files=())
    new = record(
        journal,
        changes,
        principal=principal,
        restored=checkpoint_id,
        restored_before=before,
    )
    return next(cp for cp in list_checkpoints(journal) if cp.checkpoint_id == new)


_CHECKPOINTED = WORKSPACE_KINDS[0]
PART_BYTES = 256 * 1024
"""About how many bytes of file entries one ``workspace.checkpointed`` event carries: a call
that changed more files is recorded as several events of the same checkpoint, in one append
(each event must fit the journal's payload limit)."""


def _parts(files: tuple[FileChange, ...]) -> list[tuple[dict[str, Any], ...]]:
    """``files`` as event entries, cut into parts of about :data:`PART_BYTES` (at least one)."""
    parts: list[tuple[dict[str, Any], ...]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for f in files:
        entry = msgspec.structs.asdict(f)
        cost = len(f.path.encode()) + 180
        if current and size + cost > PART_BYTES:
            parts.append(tuple(current))
            current, size = [], 0
        current.append(entry)
        size += cost
    parts.append(tuple(current))
    return parts


def _stored(journal: KindReader) -> Sequence[StoredEvent]:
    return journal.events_of_kinds(WORKSPACE_KINDS)


def _checkpoint(stored: StoredEvent) -> WorkspaceCheckpoint:
    event = stored.decode()
    assert isinstance(event, WorkspaceCheckpointed)
    return WorkspaceCheckpoint(
        checkpoint_id=event.checkpoint_id,
        position=stored.position,
        recorded_at_ms=stored.recorded_at_ms,
        principal=stored.principal,
        files=tuple(msgspec.convert(f, FileChange) for f in event.files),
        complete=event.complete,
        tool=event.tool,
        invocation_id=event.invocation_id,
        run_id=event.run_id,
        session_id=event.session_id,
        restored=event.restored,
        restored_before=event.restored_before,
    )


def _index(all_: list[WorkspaceCheckpoint], checkpoint_id: str) -> int:
    for i, cp in enumerate(all_):
        if cp.checkpoint_id == checkpoint_id:
            return i
    raise UnknownCheckpoint(f"no workspace checkpoint with id {checkpoint_id!r}")


def _entry(checkpointer: Checkpointer, path: str, at: str | None, now: str | None) -> DiffEntry:
    texts: list[list[str]] = []
    for digest in (at, now):
        if digest is None:
            texts.append([])
            continue
        try:
            texts.append(checkpointer.store.get(digest).decode("utf-8").splitlines(keepends=True))
        except (StoreFault, UnicodeDecodeError):
            return DiffEntry(path=path, at=at, now=now)
    import difflib  # fs.diff's alone: not loaded with the node

    text = "".join(difflib.unified_diff(texts[0], texts[1], f"a/{path}", f"b/{path}"))
    cut = len(text) > DIFF_MAX_CHARS
    return DiffEntry(path=path, at=at, now=now, diff=text[:DIFF_MAX_CHARS], cut=cut)
