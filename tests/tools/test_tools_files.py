from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import msgspec
import pytest

from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.files import FileRuntime


def _catalog(**config: object) -> ToolCatalog:
    return ToolCatalog([FileRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]


def _call(
    workspace: Path, name: str, arguments: Mapping[str, object], **config: object
) -> ToolResult:
    catalog = _catalog(**config)
    return catalog.execute(
        name, catalog.validate(name, arguments), ExecutionContext.start(workspace, 10)
    )


class TestFileConformance(RuntimeConformance):
    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return _catalog()

    def quick_call(self, workspace: Path) -> Call:
        (workspace / "a.txt").write_text("a")
        return ("fs.read", {"path": "a.txt"})


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("top secret")
    return d


def test_read_write_list_round_trip(workspace: Path) -> None:
    wrote = _call(
        workspace, "fs.write", {"path": "sub/dir/n.txt", "content": "héllo", "create_dirs": True}
    )
    assert wrote.ok, wrote.error
    assert msgspec.json.decode(wrote.output) == {
        "path": "sub/dir/n.txt",
        "bytes_written": 6,
        "created": True,
    }
    read = _call(workspace, "fs.read", {"path": "sub/dir/n.txt"})
    assert msgspec.json.decode(read.output)["content"] == "héllo"
    listed = msgspec.json.decode(_call(workspace, "fs.list", {"path": "sub/dir"}).output)
    assert listed["entries"] == [{"name": "n.txt", "type": "file", "size": 6}]
    again = _call(workspace, "fs.write", {"path": "sub/dir/n.txt", "content": "x"})
    assert msgspec.json.decode(again.output)["created"] is False
    assert (workspace / "sub/dir/n.txt").read_text() == "x"


def test_write_without_create_dirs_needs_the_parent(workspace: Path) -> None:
    result = _call(workspace, "fs.write", {"path": "missing/n.txt", "content": "x"})
    assert (result.error_kind, result.error) == (
        "invalid",
        "path: directory 'missing' does not exist",
    )


@pytest.mark.parametrize("tool", ["fs.read", "fs.list", "fs.write"])
@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../x", "escapes the workspace"),
        ("a/../../x", "escapes the workspace"),
        ("/etc/passwd", "is absolute"),
    ],
)
def test_paths_outside_are_denied(workspace: Path, tool: str, path: str, problem: str) -> None:
    args: dict[str, object] = {"path": path}
    if tool == "fs.write":
        args["content"] = "x"
    result = _call(workspace, tool, args)
    assert (result.ok, result.error_kind) == (False, "denied")
    assert problem in (result.error or "")


def test_symlink_to_etc_is_denied(workspace: Path) -> None:
    (workspace / "passwd").symlink_to("/etc/passwd")
    result = _call(workspace, "fs.read", {"path": "passwd"})
    assert result.error_kind == "denied"
    assert result.error == "path: 'passwd' is a symlink; symlinks are not followed"
    assert "root:" not in result.output


def test_symlinked_parent_dir_is_denied(workspace: Path, outside: Path) -> None:
    (workspace / "link").symlink_to(outside)
    assert _call(workspace, "fs.read", {"path": "link/secret.txt"}).error_kind == "denied"
    assert _call(workspace, "fs.list", {"path": "link"}).error_kind == "denied"
    wrote = _call(workspace, "fs.write", {"path": "link/new.txt", "content": "x"})
    assert wrote.error_kind == "denied"
    assert not (outside / "new.txt").exists()


def test_write_through_a_symlinked_file_is_denied(workspace: Path, outside: Path) -> None:
    (workspace / "evil").symlink_to(outside / "secret.txt")
    result = _call(workspace, "fs.write", {"path": "evil", "content": "pwned"})
    assert result.error_kind == "denied"
    assert (outside / "secret.txt").read_text() == "top secret"


def test_symlink_that_stays_inside_is_not_followed_either(workspace: Path) -> None:
    (workspace / "real.txt").write_text("inside")
    (workspace / "alias").symlink_to("real.txt")
    (workspace / "dir").mkdir()
    (workspace / "dirlink").symlink_to("dir")
    assert _call(workspace, "fs.read", {"path": "alias"}).error_kind == "denied"
    wrote = _call(workspace, "fs.write", {"path": "dirlink/x", "content": "x"})
    assert wrote.error_kind == "denied" and not (workspace / "dir" / "x").exists()
    assert _call(workspace, "fs.read", {"path": "real.txt"}).ok


def test_hard_linked_file_is_not_written(workspace: Path, outside: Path) -> None:
    try:
        os.link(outside / "secret.txt", workspace / "hard")
    except OSError:
        pytest.skip("hard links not possible here")
    assert _call(workspace, "fs.write", {"path": "hard", "content": "x"}).error_kind == "denied"
    assert (outside / "secret.txt").read_text() == "top secret"


def test_read_cap_truncates_and_marks(workspace: Path) -> None:
    (workspace / "big.txt").write_bytes(b"a" * 5000)
    result = _call(workspace, "fs.read", {"path": "big.txt"}, fs_read_cap_bytes=1000)
    body = msgspec.json.decode(result.output)
    assert result.ok and result.truncated and body["truncated"]
    assert len(body["content"]) == 1000 and body["size"] == 5000
    small = _call(workspace, "fs.read", {"path": "big.txt", "max_bytes": 10})
    assert msgspec.json.decode(small.output)["content"] == "a" * 10 and small.truncated


def test_write_cap_refuses(workspace: Path) -> None:
    result = _call(
        workspace, "fs.write", {"path": "w.txt", "content": "x" * 101}, fs_write_cap_bytes=100
    )
    assert (result.error_kind, result.error) == (
        "limit",
        "content: 101 bytes exceeds the write cap of 100",
    )
    assert not (workspace / "w.txt").exists()


def test_non_utf8_file_is_decoded_with_replacement(workspace: Path) -> None:
    (workspace / "bin").write_bytes(b"ok \xff\xfe end")
    result = _call(workspace, "fs.read", {"path": "bin"})
    assert result.ok and result.lossy
    assert msgspec.json.decode(result.output)["content"] == "ok \ufffd\ufffd end"


def test_reading_a_directory_or_fifo_is_invalid(workspace: Path) -> None:
    (workspace / "d").mkdir()
    os.mkfifo(workspace / "fifo")
    assert _call(workspace, "fs.read", {"path": "d"}).error_kind == "invalid"
    assert _call(workspace, "fs.read", {"path": "fifo"}).error_kind == "invalid"
    missing = _call(workspace, "fs.read", {"path": "nothing"})
    assert missing.error == "path: 'nothing' does not exist"


def test_list_reports_symlinks_without_following(workspace: Path) -> None:
    (workspace / "l").symlink_to("/etc")
    listed = msgspec.json.decode(_call(workspace, "fs.list", {}).output)
    assert listed["entries"] == [{"name": "l", "type": "symlink"}]


def test_list_cap(workspace: Path) -> None:
    for i in range(5):
        (workspace / f"f{i}").write_text("")
    result = _call(workspace, "fs.list", {"path": "."}, fs_list_max_entries=3)
    assert result.truncated
    assert [e["name"] for e in msgspec.json.decode(result.output)["entries"]] == ["f0", "f1", "f2"]


# --- hostile: hard links, symlinks, /proc tricks, races -------------------------------------


def _hard_link(target: Path, link: Path) -> None:
    try:
        os.link(target, link)
    except OSError as exc:
        pytest.skip(f"hard links not possible here: {exc}")


def test_hard_link_to_a_file_outside_is_not_read(workspace: Path, outside: Path) -> None:
    _hard_link(outside / "secret.txt", workspace / "hard")
    result = _call(workspace, "fs.read", {"path": "hard"})
    assert (result.ok, result.error_kind) == (False, "denied")
    assert "2 hard links" in (result.error or "")
    assert "top secret" not in result.output


def test_hard_link_inside_a_subdir_is_refused_too(workspace: Path, outside: Path) -> None:
    (workspace / "d").mkdir()
    _hard_link(outside / "secret.txt", workspace / "d" / "hard")
    for tool, args in (
        ("fs.read", {"path": "d/hard"}),
        ("fs.write", {"path": "d/hard", "content": "pwned"}),
    ):
        assert _call(workspace, tool, args).error_kind == "denied", tool
    assert (outside / "secret.txt").read_text() == "top secret"


def test_a_file_linked_twice_inside_the_workspace_is_refused(workspace: Path) -> None:
    # A link count cannot say where the other name is, so every multi-link file is refused.
    (workspace / "a").write_text("a")
    _hard_link(workspace / "a", workspace / "b")
    assert _call(workspace, "fs.read", {"path": "a"}).error_kind == "denied"


@pytest.mark.parametrize(
    "target", ["/proc/self/root", "/proc/self/cwd", "/proc/self/fd", "/", ".."]
)
def test_proc_and_root_symlinks_lead_nowhere(workspace: Path, target: str) -> None:
    (workspace / "r").symlink_to(target)
    for path in ("r/etc/passwd", "r/secret.txt", "r"):
        result = _call(workspace, "fs.read", {"path": path})
        assert result.error_kind in ("denied", "invalid"), (path, result)
        assert "root:" not in result.output
    assert _call(workspace, "fs.list", {"path": "r"}).error_kind == "denied"


def test_dotdot_through_a_symlinked_dir_cannot_climb(workspace: Path, outside: Path) -> None:
    (workspace / "d").mkdir()
    (workspace / "d" / "up").symlink_to(outside)
    result = _call(workspace, "fs.read", {"path": "d/up/../up/secret.txt"})
    assert result.error_kind == "denied" and "top secret" not in result.output


def test_symlink_swapped_in_after_the_check_is_not_followed(
    workspace: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOCTOU at the leaf: the entry is a regular file when checked, a symlink to a secret
    outside when opened; O_NOFOLLOW makes the open fail."""
    import tools.workspace as ws

    (workspace / "f").write_text("inside")
    real_lstat = ws._lstat

    def swap_after_check(name: str, dfd: int) -> os.stat_result | None:
        found = real_lstat(name, dfd)
        os.unlink(name, dir_fd=dfd)
        os.symlink(outside / "secret.txt", name, dir_fd=dfd)
        return found

    monkeypatch.setattr(ws, "_lstat", swap_after_check)
    read = _call(workspace, "fs.read", {"path": "f"})
    assert (read.error_kind, "top secret" in read.output) == ("denied", False)
    (workspace / "f").unlink()
    (workspace / "f").write_text("inside")
    wrote = _call(workspace, "fs.write", {"path": "f", "content": "pwned"})
    assert wrote.error_kind == "denied"
    assert (outside / "secret.txt").read_text() == "top secret"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("swapped", ["directory", "file"])
def test_racing_symlink_swaps_never_leak_or_write_outside(
    workspace: Path, outside: Path, swapped: str
) -> None:
    """A thread keeps swapping ``d`` (a directory) or ``d/secret.txt`` (a file) for a symlink
    to the outside one while fs.read and fs.write run: each call works inside or is refused;
    the outside secret is never read and never written."""
    (workspace / "d").mkdir()
    (workspace / "d" / "secret.txt").write_text("inside")
    name = workspace / "d" if swapped == "directory" else workspace / "d" / "secret.txt"
    target = outside if swapped == "directory" else outside / "secret.txt"
    parked = name.with_name(name.name + ".parked")
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.rename(name, parked)
                os.symlink(target, name)
                time.sleep(0.001)  # long enough for some calls to meet the symlink
                os.unlink(name)
                os.rename(parked, name)

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        outcomes: set[str | None] = set()
        for i in range(300):
            read = _call(workspace, "fs.read", {"path": "d/secret.txt"})
            assert "top secret" not in read.output
            outcomes.add(read.error_kind)
            _call(workspace, "fs.write", {"path": "d/secret.txt", "content": f"pwned {i}"})
            assert (outside / "secret.txt").read_text() == "top secret"
    finally:
        stop.set()
        flipper.join(5)
    assert "denied" in outcomes  # the calls really met the symlink


def test_read_is_cut_to_the_callers_budget_with_a_marker(workspace: Path) -> None:
    text = "é\x01" * 3000  # escapes grow in JSON: \u0001 is 6 bytes
    (workspace / "f").write_text(text)
    catalog = _catalog()
    ctx = ExecutionContext.start(workspace, 10, output_budget_bytes=2000)
    result = catalog.execute("fs.read", catalog.validate("fs.read", {"path": "f"}), ctx)
    assert result.ok and result.truncated
    assert len(result.output.encode()) <= 2000
    body = msgspec.json.decode(result.output)  # still JSON: cut inside, not after encoding
    assert body["truncated"] is True and body["size"] == len(text.encode())
    assert body["note"] == "content cut to fit the result size limit of 2000 bytes"
    assert text.startswith(body["content"]) and len(body["content"]) > 100


def test_list_is_cut_to_the_callers_budget(workspace: Path) -> None:
    for i in range(200):
        (workspace / f"file-with-a-longish-name-{i:04}").write_text("")
    catalog = _catalog()
    ctx = ExecutionContext.start(workspace, 10, output_budget_bytes=1500)
    result = catalog.execute("fs.list", catalog.validate("fs.list", {}), ctx)
    assert result.ok and result.truncated and len(result.output.encode()) <= 1500
    assert msgspec.json.decode(result.output)["truncated"] is True
