"""actors/checkpoints.py on a real journal and store: a checkpoint of more files than one event
holds is recorded in parts and listed whole; a restore is recorded and restorable; a restore
needing a lost version writes nothing and records nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.checkpoints import PART_BYTES, list_checkpoints, record, restore
from actors.errors import CheckpointUnrestorable, UnknownCheckpoint
from events import Journal, NodeKey
from events.catalog import WORKSPACE_KINDS
from tools.checkpoints import BlobStore, Checkpointer
from tools.result import FileChange, WorkspaceChanges


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "k")) as j:
        yield j


@pytest.fixture
def checkpointer(tmp_path: Path) -> Checkpointer:
    return Checkpointer(
        store=BlobStore(tmp_path / "blobs", 1 << 30), scan_max_files=100, file_max_bytes=1 << 20
    )


def test_a_checkpoint_of_many_files_is_recorded_in_parts_and_listed_whole(
    journal: Journal,
) -> None:
    files = tuple(
        FileChange(path=f"{'deep/' * 40}file{i:05}.txt", before=None, after=sha(str(i).encode()))
        for i in range(4000)
    )
    made = record(journal, WorkspaceChanges(files=files), principal="user:ann", tool="shell.run")
    stored = journal.events_of_kinds(WORKSPACE_KINDS)
    assert len(stored) > 1 and all(len(e.payload) < 2 * PART_BYTES for e in stored)
    (listed,) = list_checkpoints(journal)
    assert listed.checkpoint_id == made and listed.files == files
    assert listed.position == stored[0].position and listed.principal == "user:ann"


def test_restore_records_itself_and_can_be_undone(
    journal: Journal, checkpointer: Checkpointer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for text in (b"v1", b"v2"):
        snap = checkpointer.snapshot(workspace, ("a.txt",))
        (workspace / "a.txt").write_bytes(text)
        changes = checkpointer.changes(workspace, snap)
        assert changes is not None
        record(journal, changes, principal="user:ann", tool="fs.write")
    first, _ = list_checkpoints(journal)
    back = restore(
        journal, checkpointer, workspace, first.checkpoint_id, before=False, principal="user:bob"
    )
    assert (workspace / "a.txt").read_bytes() == b"v1"
    assert back.restored == first.checkpoint_id and back.principal == "user:bob"
    assert back.files == (FileChange("a.txt", sha(b"v2"), sha(b"v1")),)
    undo = restore(
        journal, checkpointer, workspace, back.checkpoint_id, before=True, principal="user:bob"
    )
    assert (workspace / "a.txt").read_bytes() == b"v2"
    assert undo.restored_before is True
    with pytest.raises(UnknownCheckpoint):
        restore(
            journal,
            checkpointer,
            workspace,
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            before=False,
            principal="x",
        )
    checkpointer.store.path_of(sha(b"v1")).unlink()
    count = len(list_checkpoints(journal))
    with pytest.raises(CheckpointUnrestorable, match=r"a\.txt: blob .* nothing was restored"):
        restore(journal, checkpointer, workspace, first.checkpoint_id, before=False, principal="x")
    assert (workspace / "a.txt").read_bytes() == b"v2"
    assert len(list_checkpoints(journal)) == count


def test_a_restore_refused_midway_puts_back_what_it_wrote(
    journal: Journal, checkpointer: Checkpointer, tmp_path: Path
) -> None:
    """The second file's directory became a symlink since: the first file, already written,
    gets its content back and the restore is refused."""
    workspace = tmp_path / "ws"
    (workspace / "b").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    for path, text in (("a.txt", b"a1"), ("b/c.txt", b"c1"), ("a.txt", b"a2"), ("b/c.txt", b"c2")):
        snap = checkpointer.snapshot(workspace, (path,))
        (workspace / path).write_bytes(text)
        changes = checkpointer.changes(workspace, snap)
        assert changes is not None
        record(journal, changes, principal="user:ann", tool="fs.write")
    first = list_checkpoints(journal)[1]  # a1 and c1 written
    (workspace / "b" / "c.txt").unlink()
    (workspace / "b").rmdir()
    (workspace / "b").symlink_to(outside)
    with pytest.raises(CheckpointUnrestorable, match="not a plain directory"):
        restore(journal, checkpointer, workspace, first.checkpoint_id, before=False, principal="x")
    assert (workspace / "a.txt").read_bytes() == b"a2"
    assert list(outside.iterdir()) == []
