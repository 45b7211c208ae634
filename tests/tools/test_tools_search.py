"""fs.search: ripgrep confined to the workspace (no symlink followed, multi-link files dropped,
caps held), with real files and the real rg binary."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.files import FileRuntime
from tools.search import LINE_MAX_CHARS, find_rg


def search(workspace: Path, arguments: Mapping[str, object], **config: Any) -> ToolResult:
    catalog = ToolCatalog([FileRuntime(ToolsConfig(**config))])
    args = catalog.validate("fs.search", arguments)
    return catalog.execute("fs.search", args, ExecutionContext.start(workspace, 10))


def hits(result: ToolResult) -> list[tuple[str, int, str]]:
    assert result.ok, result.error
    body = msgspec.json.decode(result.output)
    return [(m["path"], m["line"], m["text"]) for m in body["matches"]]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("needle outside\n")
    return d


def test_rg_is_installed_with_the_project() -> None:
    assert find_rg() is not None


def test_regex_literal_case_and_globs(workspace: Path) -> None:
    (workspace / "a.py").write_text("def f():\n    return 1\n")
    (workspace / "sub").mkdir()
    (workspace / "sub" / "b.txt").write_text("a.b\naxb\nDEF\n")
    assert hits(search(workspace, {"pattern": r"^def \w+"})) == [("a.py", 1, "def f():")]
    assert hits(search(workspace, {"pattern": "a.b", "literal": True})) == [("sub/b.txt", 1, "a.b")]
    assert {h[0] for h in hits(search(workspace, {"pattern": "def", "ignore_case": True}))} == {
        "a.py",
        "sub/b.txt",
    }
    assert hits(search(workspace, {"pattern": "def", "ignore_case": True, "globs": ["*.txt"]})) == [
        ("sub/b.txt", 3, "DEF")
    ]
    assert hits(search(workspace, {"pattern": "def", "globs": ["!*.py"]})) == []
    assert hits(search(workspace, {"pattern": "x", "path": "sub"})) == [("sub/b.txt", 2, "axb")]


def test_a_symlink_to_outside_inside_the_workspace_is_not_followed(
    workspace: Path, outside: Path
) -> None:
    (workspace / "etc").symlink_to("/etc")
    (workspace / "out").symlink_to(outside)
    (workspace / "s.txt").symlink_to(outside / "secret.txt")
    (workspace / "mine.txt").write_text("needle root\n")
    found = hits(search(workspace, {"pattern": "needle|root"}))
    assert found == [("mine.txt", 1, "needle root")]


@pytest.mark.parametrize("path", ["out", "out/sub", "/etc", "../outside", "mine/../../outside"])
def test_a_search_root_outside_or_through_a_symlink_is_refused(
    workspace: Path, outside: Path, path: str
) -> None:
    (workspace / "out").symlink_to(outside)
    (workspace / "mine").mkdir()
    result = search(workspace, {"pattern": "needle", "path": path})
    assert not result.ok
    assert result.error_kind == "denied", result.error
    assert "outside" not in result.output


def test_a_hard_link_to_a_file_outside_is_dropped_and_counted(
    workspace: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", workspace / "linked.txt")
    result = search(workspace, {"pattern": "needle"})
    body = msgspec.json.decode(result.output)
    assert body["matches"] == []
    assert body["skipped"] == 1
    assert "needle outside" not in result.output


def test_caps_hold(workspace: Path) -> None:
    for i in range(30):
        (workspace / f"f{i:02}.txt").write_text("hit\n" * 5)
    body = msgspec.json.decode(search(workspace, {"pattern": "hit", "max_results": 7}).output)
    assert len(body["matches"]) == 7 and body["truncated"] is True
    capped = search(workspace, {"pattern": "hit", "max_results": 500}, fs_search_max_results=12)
    body = msgspec.json.decode(capped.output)
    assert len(body["matches"]) == 12 and body["truncated"] is True
    (workspace / "long.txt").write_text("hit" + "x" * 5000 + "\n")
    long = [
        m for m in msgspec.json.decode(search(workspace, {"pattern": "hitx"}).output)["matches"]
    ]
    assert len(long[0]["text"]) == LINE_MAX_CHARS and long[0]["cut"] is True
    (workspace / "big.txt").write_text("bighit\n" * 1000)
    assert hits(search(workspace, {"pattern": "bighit"}, fs_search_file_max_bytes=100)) == []


def test_output_fits_the_callers_budget(workspace: Path) -> None:
    (workspace / "many.txt").write_text("match line\n" * 300)
    catalog = ToolCatalog([FileRuntime(ToolsConfig())])
    args = catalog.validate("fs.search", {"pattern": "match", "max_results": 200})
    ctx = ExecutionContext.start(workspace, 10, output_budget_bytes=2000)
    result = catalog.execute("fs.search", args, ctx)
    body = msgspec.json.decode(result.output)
    assert len(result.output.encode()) <= 2000
    assert body["truncated"] is True and 0 < len(body["matches"]) < 200


@pytest.mark.parametrize(
    ("arguments", "kind", "fragment"),
    [
        ({"pattern": "("}, "invalid", "regex parse error"),
        ({"pattern": "x", "globs": ["{a"]}, "invalid", "glob"),
        ({"pattern": "x", "path": "nope"}, "invalid", "does not exist"),
    ],
)
def test_bad_input_names_the_problem(
    workspace: Path, arguments: Mapping[str, object], kind: str, fragment: str
) -> None:
    result = search(workspace, arguments)
    assert not result.ok and result.error_kind == kind
    assert result.error is not None and fragment in result.error


def test_the_pattern_is_never_taken_for_an_option(workspace: Path) -> None:
    (workspace / "a.txt").write_text("--files\n")
    assert hits(search(workspace, {"pattern": "--files"})) == [("a.txt", 1, "--files")]
