"""Workspace checkpoints around writing calls (tools/checkpoints.py): what fs.write,
fs.apply_patch and shell.run changed, with before and after hashes; blobs kept once and
pruned by retention; a restore that needs a missing blob refuses with nothing written."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.checkpoints import BlobStore, Checkpointer, StoreFault
from tools.files import FileRuntime
from tools.result import FileChange
from tools.shell import ShellRuntime


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make(store: Path, *, max_bytes: int = 1 << 30, scan_max_files: int = 1000) -> Checkpointer:
    return Checkpointer(
        store=BlobStore(store, max_bytes), scan_max_files=scan_max_files, file_max_bytes=1 << 20
    )


def run(
    catalog: ToolCatalog, workspace: Path, name: str, arguments: dict[str, object]
) -> ToolResult:
    return catalog.execute(
        name, catalog.validate(name, arguments), ExecutionContext.start(workspace, 20)
    )


@pytest.fixture
def checkpointer(tmp_path: Path) -> Checkpointer:
    return make(tmp_path / "checkpoints")


@pytest.fixture
def files(checkpointer: Checkpointer) -> ToolCatalog:
    return ToolCatalog([FileRuntime(ToolsConfig())], checkpointer)


def test_fs_write_records_before_and_after_and_keeps_both(
    workspace: Path, files: ToolCatalog, checkpointer: Checkpointer
) -> None:
    (workspace / "a.txt").write_bytes(b"old\n")
    result = run(files, workspace, "fs.write", {"path": "a.txt", "content": "new\n"})
    assert result.ok and result.workspace is not None
    assert result.workspace.files == (FileChange("a.txt", sha(b"old\n"), sha(b"new\n")),)
    assert checkpointer.store.get(sha(b"old\n")) == b"old\n"
    assert checkpointer.store.get(sha(b"new\n")) == b"new\n"
    created = run(files, workspace, "fs.write", {"path": "b.txt", "content": "b"})
    assert created.workspace is not None
    assert created.workspace.files == (FileChange("b.txt", None, sha(b"b")),)


def test_reads_searches_and_failed_or_idle_writes_record_nothing(
    workspace: Path, files: ToolCatalog
) -> None:
    (workspace / "a.txt").write_text("same")
    assert run(files, workspace, "fs.read", {"path": "a.txt"}).workspace is None
    assert run(files, workspace, "fs.search", {"pattern": "x"}).workspace is None
    same = run(files, workspace, "fs.write", {"path": "a.txt", "content": "same"})
    assert same.ok and same.workspace is None
    bad = run(
        files,
        workspace,
        "fs.apply_patch",
        {"patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-no\n+x\n"},
    )
    assert not bad.ok and bad.workspace is None


def test_a_patch_records_every_file_it_changed(workspace: Path, files: ToolCatalog) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "gone.txt").write_text("bye\n")
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n"
        "--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+c\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    result = run(files, workspace, "fs.apply_patch", {"patch": patch})
    assert result.ok and result.workspace is not None
    assert result.workspace.files == (
        FileChange("a.txt", sha(b"one\n"), sha(b"ONE\n")),
        FileChange("c.txt", None, sha(b"c\n")),
        FileChange("gone.txt", sha(b"bye\n"), None),
    )


@pytest.mark.usefixtures("sandbox_required")
def test_a_shell_call_that_writes_is_compared_over_the_whole_tree(
    workspace: Path, checkpointer: Checkpointer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (workspace / "etc").symlink_to("/etc")
    (workspace / "out").symlink_to(outside)
    (workspace / "keep.txt").write_text("keep")
    (workspace / "edit.txt").write_text("before")
    shell = ToolCatalog(
        [ShellRuntime(ToolsConfig(shell_allowlist=("sh",), shell_allowed_wrappers=("sh",)))],
        checkpointer,
    )
    script = "echo after > edit.txt; mkdir -p d; echo x > d/new.txt"
    result = run(shell, workspace, "shell.run", {"argv": ["sh", "-c", script]})
    assert result.ok, result.error
    assert result.workspace is not None and result.workspace.complete
    assert result.workspace.files == (
        FileChange("d/new.txt", None, sha(b"x\n")),
        FileChange("edit.txt", sha(b"before"), sha(b"after\n")),
    )
    stored = {p.name for p in (checkpointer.store.root / "sha256").glob("*/*")}
    assert sha(b"secret") not in stored  # the symlinks were not followed
    assert sha(b"keep") in stored  # every file in scope is kept: any may change
    quiet = run(shell, workspace, "shell.run", {"argv": ["sh", "-c", "true"]})
    assert quiet.ok and quiet.workspace is None


def test_a_tree_walk_past_its_bound_says_it_is_incomplete(workspace: Path, tmp_path: Path) -> None:
    for i in range(5):
        (workspace / f"f{i}.txt").write_text(str(i))
    small = make(tmp_path / "store", scan_max_files=3)
    before = small.snapshot(workspace, None)
    (workspace / "f0.txt").write_text("changed")
    changes = small.changes(workspace, before)
    assert changes is not None and changes.complete is False
    assert [f.path for f in changes.files] == ["f0.txt"]


def test_retention_prunes_least_recently_used_blobs_and_reports_them(
    workspace: Path, tmp_path: Path
) -> None:
    cp = make(tmp_path / "store", max_bytes=2500)
    catalog = ToolCatalog([FileRuntime(ToolsConfig())], cp)
    contents = [bytes([65 + i]) * 1000 for i in range(3)]
    first = run(catalog, workspace, "fs.write", {"path": "a.txt", "content": contents[0].decode()})
    assert first.workspace is not None and first.workspace.pruned is None
    old = cp.store.path_of(sha(contents[0]))
    os.utime(old, (1, 1))  # the least recently used
    second = run(catalog, workspace, "fs.write", {"path": "b.txt", "content": contents[1].decode()})
    assert second.workspace is not None and second.workspace.pruned is None
    third = run(catalog, workspace, "fs.write", {"path": "c.txt", "content": contents[2].decode()})
    assert third.workspace is not None and third.workspace.pruned is not None
    assert third.workspace.pruned.blobs == (sha(contents[0]),)
    assert third.workspace.pruned.freed_bytes == 1000
    assert not old.exists()
    assert cp.store.get(sha(contents[2])) == contents[2]  # the current checkpoint's blobs stay


def test_a_restore_whose_blob_is_gone_refuses_and_writes_nothing(
    workspace: Path, checkpointer: Checkpointer
) -> None:
    (workspace / "a.txt").write_text("now a")
    (workspace / "b.txt").write_text("now b")
    kept, lost = b"old a", b"old b"
    checkpointer.store.put(sha(kept), kept)
    checkpointer.store.put(sha(lost), lost)
    checkpointer.store.path_of(sha(lost)).unlink()
    with pytest.raises(StoreFault, match=f"b.txt: blob {sha(lost)} is not in the checkpoint store"):
        checkpointer.restore(workspace, {"a.txt": sha(kept), "b.txt": sha(lost)})
    assert (workspace / "a.txt").read_text() == "now a"
    assert (workspace / "b.txt").read_text() == "now b"


def test_a_tampered_blob_is_refused(workspace: Path, checkpointer: Checkpointer) -> None:
    checkpointer.store.put(sha(b"good"), b"good")
    checkpointer.store.path_of(sha(b"good")).write_bytes(b"evil")
    with pytest.raises(StoreFault, match="does not match its hash"):
        checkpointer.restore(workspace, {"a.txt": sha(b"good")})
    assert not (workspace / "a.txt").exists()


def test_a_restore_never_writes_through_a_symlink(
    workspace: Path, checkpointer: Checkpointer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "dir").symlink_to(outside)
    checkpointer.store.put(sha(b"x"), b"x")
    with pytest.raises(Exception, match="not a plain directory"):
        checkpointer.restore(workspace, {"dir/a.txt": sha(b"x")})
    assert list(outside.iterdir()) == []


def test_the_store_is_private(
    workspace: Path, files: ToolCatalog, checkpointer: Checkpointer
) -> None:
    run(files, workspace, "fs.write", {"path": "a.txt", "content": "x"})
    root = checkpointer.store.root
    blob = checkpointer.store.path_of(sha(b"x"))
    for folder in (root, root / "sha256", blob.parent):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert blob.stat().st_mode & 0o777 == 0o600


def test_no_checkpoint_no_write(workspace: Path, tmp_path: Path) -> None:
    """A store that cannot be written (here: a file where its directory should be) refuses the
    call before it runs: a write that could not be undone is not made."""
    blocked = tmp_path / "blocked"
    blocked.write_text("not a directory")
    catalog = ToolCatalog([FileRuntime(ToolsConfig())], make(blocked))
    (workspace / "a.txt").write_text("keep")
    result = run(catalog, workspace, "fs.write", {"path": "a.txt", "content": "new"})
    assert not result.ok and result.error is not None
    assert result.error.startswith("the workspace checkpoint failed")
    assert (workspace / "a.txt").read_text() == "keep"
