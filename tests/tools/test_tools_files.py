from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.files import FileRuntime


def _catalog(**config: object) -> ToolCatalog:
    return ToolCatalog([FileRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]


def _call(workspace: Path, name: str, arguments: dict[str, object], **config: object) -> ToolResult:
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
    assert "outside the workspace" in (result.error or "")
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


def test_symlink_that_stays_inside_is_followed(workspace: Path) -> None:
    (workspace / "real.txt").write_text("inside")
    (workspace / "alias").symlink_to("real.txt")
    result = _call(workspace, "fs.read", {"path": "alias"})
    assert msgspec.json.decode(result.output)["content"] == "inside"


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
