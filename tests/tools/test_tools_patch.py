"""fs.apply_patch: a unified diff, all hunks or none, confined as every fs.* tool (paths with
``..``, absolute paths, symlinks, hard links and symlinked directories refused), on real
files."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.files import FileRuntime


def apply(workspace: Path, patch: str, **config: object) -> ToolResult:
    catalog = ToolCatalog([FileRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]
    args = catalog.validate("fs.apply_patch", {"patch": patch})
    return catalog.execute("fs.apply_patch", args, ExecutionContext.start(workspace, 10))


def diff(path: str, old: str, new: str, at: int = 1) -> str:
    """A one-hunk diff replacing line ``old`` by ``new`` in ``path`` at line ``at``."""
    return f"--- a/{path}\n+++ b/{path}\n@@ -{at},1 +{at},1 @@\n-{old}\n+{new}\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("secret\n")
    return d


def test_modify_create_and_delete_in_one_patch(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo\nthree\nfour\nfive\nsix\n")
    (workspace / "gone.txt").write_text("bye\n")
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
        "@@ -5,2 +5,3 @@\n five\n six\n+seven\n"
        "--- /dev/null\n+++ b/new/dir/c.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n"
        "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    result = apply(workspace, patch)
    assert result.ok, result.error
    assert msgspec.json.decode(result.output) == {
        "files": [
            {"path": "a.txt", "change": "modified"},
            {"path": "new/dir/c.txt", "change": "created"},
            {"path": "gone.txt", "change": "deleted"},
        ]
    }
    assert (workspace / "a.txt").read_text() == "one\nTWO\nthree\nfour\nfive\nsix\nseven\n"
    assert (workspace / "new/dir/c.txt").read_text() == "hello\nworld\n"
    assert not (workspace / "gone.txt").exists()


def test_a_hunk_whose_lines_moved_applies_where_its_context_is(workspace: Path) -> None:
    (workspace / "a.txt").write_text("x\ny\none\ntwo\n")
    result = apply(workspace, diff("a.txt", "two", "TWO", at=2))
    assert result.ok, result.error
    assert (workspace / "a.txt").read_text() == "x\ny\none\nTWO\n"


def test_no_newline_at_end_of_file(workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"one\ntwo")
    patch = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n\\ No newline at end of file\n"
        "+TWO\n\\ No newline at end of file\n"
    )
    result = apply(workspace, patch)
    assert result.ok, result.error
    assert (workspace / "a.txt").read_bytes() == b"one\nTWO"


def test_a_hunk_that_fails_midway_leaves_every_file_untouched(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / "b.txt").write_text("alpha\nbeta\ngamma\n")
    patch = (
        diff("a.txt", "one", "ONE")
        + "--- a/b.txt\n+++ b/b.txt\n@@ -1,1 +1,1 @@\n-alpha\n+ALPHA\n"
        + "@@ -3,1 +3,1 @@\n-delta\n+DELTA\n"
    )
    result = apply(workspace, patch)
    assert not result.ok and result.error_kind == "failed"
    assert result.error is not None
    assert result.error.startswith("hunk 3 (the 2nd of b.txt, @@ -3,1 +3,1 @@) does not apply")
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"
    assert (workspace / "b.txt").read_text() == "alpha\nbeta\ngamma\n"


def test_a_write_that_fails_after_others_puts_them_back(workspace: Path, outside: Path) -> None:
    """The last file is a directory where the patch creates a file: the plan passes (nothing
    there is a file yet) but its write fails, so the first file gets its old content back."""
    (workspace / "a.txt").write_text("one\n")
    (workspace / "later").mkdir()
    patch = diff("a.txt", "one", "ONE") + "--- /dev/null\n+++ b/later/\n@@ -0,0 +1 @@\n+x\n"
    result = apply(workspace, patch)
    assert not result.ok
    assert (workspace / "a.txt").read_text() == "one\n"


@pytest.mark.parametrize(
    "path",
    ["../outside/secret.txt", "sub/../../outside/secret.txt", "/etc/hostname", "/tmp/x"],
)
def test_paths_outside_the_workspace_are_refused(workspace: Path, outside: Path, path: str) -> None:
    (workspace / "sub").mkdir()
    patch = f"--- {path}\n+++ {path}\n@@ -1 +1 @@\n-secret\n+owned\n"
    result = apply(workspace, patch)
    assert not result.ok and result.error_kind == "denied", result.error
    assert (outside / "secret.txt").read_text() == "secret\n"


def test_symlinks_hard_links_and_symlinked_dirs_are_refused(workspace: Path, outside: Path) -> None:
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    (workspace / "dir").symlink_to(outside)
    os.link(outside / "secret.txt", workspace / "hard.txt")
    for path, fragment in (
        ("link.txt", "symlink"),
        ("dir/secret.txt", "not a plain directory"),
        ("hard.txt", "hard links"),
    ):
        result = apply(workspace, diff(path, "secret", "owned"))
        assert not result.ok and result.error_kind == "denied", (path, result.error)
        assert result.error is not None and fragment in result.error
    created = apply(workspace, "--- /dev/null\n+++ b/dir/new.txt\n@@ -0,0 +1 @@\n+x\n")
    assert not created.ok and created.error_kind == "denied"
    deleted = apply(workspace, "--- a/hard.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-secret\n")
    assert not deleted.ok and deleted.error_kind == "denied"
    assert (outside / "secret.txt").read_text() == "secret\n"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ("not a diff at all", "holds no file"),
        ("--- a/x\n+++ b/y\n@@ -1 +1 @@\n-a\n+b\n", "renames"),
        ("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n", "twice"),
        ("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n-a\n", "not a unified diff"),
    ],
)
def test_bad_patches_are_invalid(workspace: Path, patch: str, fragment: str) -> None:
    result = apply(workspace, patch)
    assert not result.ok and result.error_kind == "invalid"
    assert result.error is not None and fragment in result.error


def test_creating_a_file_that_exists_fails(workspace: Path) -> None:
    (workspace / "c.txt").write_text("mine\n")
    result = apply(workspace, "--- /dev/null\n+++ b/c.txt\n@@ -0,0 +1 @@\n+x\n")
    assert not result.ok and result.error is not None and "already exists" in result.error
    assert (workspace / "c.txt").read_text() == "mine\n"


def test_size_caps(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\n")
    big = apply(workspace, diff("a.txt", "one", "x" * 200), fs_write_cap_bytes=100)
    assert not big.ok and big.error_kind == "limit"
    (workspace / "b.txt").write_text("one\n" + "z" * 150 + "\n")
    result = apply(workspace, diff("b.txt", "one", "x" * 60), fs_write_cap_bytes=200)
    assert not result.ok and result.error_kind == "limit"
    assert result.error is not None and "'b.txt' would be 212 bytes" in result.error
    assert (workspace / "b.txt").read_text() == "one\n" + "z" * 150 + "\n"
