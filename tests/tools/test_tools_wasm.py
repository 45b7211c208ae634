from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import (
    ExecutionContext,
    InvalidArguments,
    ManifestError,
    PluginLoadError,
    ToolCatalog,
    ToolResult,
    ToolsConfig,
)
from tools.plugins import EXAMPLES_DIR, load_plugins

BIG_FUEL_CONFIG = ToolsConfig(wasm_max_fuel=10**15)

LOOP = '(module (memory (export "memory") 1) (func (export "_start") (loop $l (br $l))))'

GROW = """(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (if (i32.eq (memory.grow (i32.const 1000)) (i32.const -1))
      (then (call $exit (i32.const 42))))))"""

OPEN_AND_READ = """(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "PATH")
  (func (export "_start") (local $err i32)
    (local.set $err (call $open (i32.const 3) (i32.const 0) (i32.const 16) (i32.const LEN)
      (i32.const 0) (i64.const RIGHTS) (i64.const RIGHTS) (i32.const 0) (i32.const 64)))
    (if (local.get $err) (then (call $exit (local.get $err))))
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 1024))
    (local.set $err
      (call $read (i32.load (i32.const 64)) (i32.const 0) (i32.const 1) (i32.const 8)))
    (if (local.get $err) (then (call $exit (local.get $err))))
    (i32.store (i32.const 4) (i32.load (i32.const 8)))
    (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"""

CHATTY = """(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start") (local $i i32)
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 1024))
    (loop $l
      (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 100))))))"""

WASI_ERRNO_BADF = 8
WASI_ERRNO_PERM = 63
WASI_RIGHT_FD_READ = 2
WASI_RIGHT_FD_WRITE = 64


def _open_wat(path: str, rights: int = WASI_RIGHT_FD_READ) -> str:
    return (
        OPEN_AND_READ.replace("PATH", path)
        .replace("LEN", str(len(path)))
        .replace("RIGHTS", str(rights))
    )


def _toml_value(value: Any) -> str:
    return json.dumps(value)  # JSON scalars and string lists are valid TOML values


def make_plugin(root: Path, tool_name: str, wat: str, **fields: Any) -> Path:
    """Write ``root/<dir>/manifest.toml`` and ``module.wat``; returns the plugin directory."""
    directory = root / tool_name.replace(".", "_")
    directory.mkdir(parents=True)
    (directory / "module.wat").write_text(wat)
    manifest: dict[str, Any] = {
        "name": tool_name,
        "description": "test plugin",
        "module": "module.wat",
        "fuel": 1_000_000,
        "memory_limit_bytes": 1 << 20,
        "time_limit_ms": 1000,
    }
    manifest.update(fields)
    lines = [f"{key} = {_toml_value(value)}" for key, value in manifest.items()]
    (directory / "manifest.toml").write_text("\n".join(lines) + "\n")
    return directory


def _run(
    catalog: ToolCatalog, name: str, workspace: Path, arguments: Any = None, timeout_s: float = 20
) -> ToolResult:
    return catalog.execute(
        name, catalog.validate(name, arguments or {}), ExecutionContext.start(workspace, timeout_s)
    )


def _single(
    tmp_path: Path, wat: str, config: ToolsConfig | None = None, **fields: Any
) -> ToolCatalog:
    root = tmp_path / "plugins"
    make_plugin(root, "test.plugin", wat, **fields)
    return ToolCatalog([load_plugins(root, config or ToolsConfig())])


class TestWasmConformance(RuntimeConformance):
    @pytest.fixture(autouse=True)
    def _plugins(self, tmp_path: Path) -> None:
        root = tmp_path / "plugins"
        make_plugin(root, "test.loop", LOOP, fuel=10**14, time_limit_ms=600_000)
        self.runtime = load_plugins(root, BIG_FUEL_CONFIG)
        self.examples = load_plugins(EXAMPLES_DIR, ToolsConfig())

    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return ToolCatalog([self.runtime, self.examples])

    def quick_call(self, workspace: Path) -> Call:
        return ("example.json_echo", {"message": "hi"})

    def slow_call(self, workspace: Path) -> Call:
        return ("test.loop", {})


def test_example_plugin_round_trip(workspace: Path) -> None:
    catalog = ToolCatalog([load_plugins(EXAMPLES_DIR, ToolsConfig())])
    result = _run(catalog, "example.json_echo", workspace, {"message": "héllo", "count": 2})
    assert result.ok, result.error
    assert msgspec.json.decode(result.output) == {"echo": {"message": "héllo", "count": 2}}
    assert msgspec.json.decode(
        _run(catalog, "example.json_echo", workspace, {"message": "x"}).output
    ) == {"echo": {"message": "x"}}


def test_example_plugin_arguments_are_validated() -> None:
    catalog = ToolCatalog([load_plugins(EXAMPLES_DIR, ToolsConfig())])
    with pytest.raises(InvalidArguments, match=r"Expected `str`, got `int` - at `\$.message`"):
        catalog.validate("example.json_echo", {"message": 1})
    with pytest.raises(InvalidArguments, match="missing required field `message`"):
        catalog.validate("example.json_echo", {})
    with pytest.raises(InvalidArguments, match=r">= 0 - at `\$.count`"):
        catalog.validate("example.json_echo", {"message": "x", "count": -1})
    with pytest.raises(InvalidArguments, match="unknown field `other`"):
        catalog.validate("example.json_echo", {"message": "x", "other": 1})


def test_infinite_loop_runs_out_of_fuel(tmp_path: Path, workspace: Path) -> None:
    result = _run(_single(tmp_path, LOOP, fuel=100_000), "test.plugin", workspace)
    assert (result.ok, result.error_kind, result.error) == (
        False,
        "limit",
        "fuel exhausted (100000 units)",
    )


@pytest.mark.timeout(15)
def test_infinite_loop_hits_the_epoch_deadline(tmp_path: Path, workspace: Path) -> None:
    catalog = _single(tmp_path, LOOP, BIG_FUEL_CONFIG, fuel=10**14, time_limit_ms=200)
    result = _run(catalog, "test.plugin", workspace)
    assert (result.error_kind, result.error) == ("timeout", "time limit of 200 ms exceeded")


def test_memory_growth_beyond_the_limit_is_refused(tmp_path: Path, workspace: Path) -> None:
    result = _run(_single(tmp_path, GROW), "test.plugin", workspace)
    assert (result.error_kind, result.error) == ("failed", "exited with status 42")


def test_initial_memory_above_the_limit_cannot_instantiate(tmp_path: Path, workspace: Path) -> None:
    wat = '(module (memory (export "memory") 100) (func (export "_start")))'
    result = _run(_single(tmp_path, wat), "test.plugin", workspace)
    assert result.error_kind == "limit"
    assert "could not be instantiated within its limits" in (result.error or "")


def test_path_open_without_preopens_is_denied(tmp_path: Path, workspace: Path) -> None:
    (workspace / "hello.txt").write_text("secret")
    result = _run(_single(tmp_path, _open_wat("/etc/passwd")), "test.plugin", workspace)
    assert (result.error_kind, result.error) == ("failed", f"exited with status {WASI_ERRNO_BADF}")
    assert result.output == ""


def test_granted_workspace_subdir_is_readable_and_confined(tmp_path: Path, workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "hello.txt").write_text("hi from the workspace")
    (workspace / "secret.txt").write_text("outside the grant")
    grant: dict[str, Any] = {"capabilities": ["fs.read"], "workspace_subdir": "data"}
    ok = _run(_single(tmp_path / "a", _open_wat("hello.txt"), **grant), "test.plugin", workspace)
    assert (ok.ok, ok.output) == (True, "hi from the workspace")
    escape = _run(
        _single(tmp_path / "b", _open_wat("../secret.txt"), **grant), "test.plugin", workspace
    )
    assert escape.error_kind == "failed" and escape.output == ""


def test_write_access_is_refused_under_a_read_only_grant(tmp_path: Path, workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "hello.txt").write_text("keep me")
    wat = _open_wat("hello.txt", rights=WASI_RIGHT_FD_WRITE)
    result = _run(
        _single(tmp_path, wat, capabilities=["fs.read"], workspace_subdir="data"),
        "test.plugin",
        workspace,
    )
    assert result.error == f"exited with status {WASI_ERRNO_PERM}"
    assert (workspace / "data" / "hello.txt").read_text() == "keep me"


@pytest.mark.timeout(15)
def test_endless_output_is_stopped_at_the_cap(tmp_path: Path, workspace: Path) -> None:
    endless = CHATTY.replace("(i32.const 100)", "(i32.const -1)")  # unsigned max: never ends
    catalog = _single(
        tmp_path,
        endless,
        BIG_FUEL_CONFIG,
        fuel=10**14,
        time_limit_ms=600_000,
        output_cap_bytes=4096,
    )
    result = _run(catalog, "test.plugin", workspace)
    assert (result.error_kind, result.error) == ("limit", "output exceeded 4096 bytes")
    assert result.truncated and len(result.output) == 4096


def test_output_over_the_cap_is_a_limit_even_when_the_plugin_finished(
    tmp_path: Path, workspace: Path
) -> None:
    """CHATTY ends at once: it was a result or a failure by whether the watchdog polled
    before it ended (an ok result under no load, a limit under load)."""
    result = _run(_single(tmp_path, CHATTY, output_cap_bytes=1000), "test.plugin", workspace)
    assert (result.ok, result.error_kind) == (False, "limit")
    assert result.error == "output exceeded 1000 bytes"
    assert result.truncated and len(result.output) == 1000


def test_a_trap_is_reported(tmp_path: Path, workspace: Path) -> None:
    wat = '(module (memory (export "memory") 1) (func (export "_start") unreachable))'
    result = _run(_single(tmp_path, wat), "test.plugin", workspace)
    assert result.error_kind == "failed"
    assert (result.error or "").startswith("trap: ")
    assert "unreachable" in (result.error or "")


@pytest.mark.parametrize(
    ("wat", "problem"),
    [
        ("(module (func", "invalid module"),
        ('(module (import "env" "f" (func)) (func (export "_start")))', "imports env.f"),
        ('(module (func (export "main")))', "does not export a `_start` function"),
    ],
)
def test_bad_modules_fail_at_load_naming_the_plugin(tmp_path: Path, wat: str, problem: str) -> None:
    with pytest.raises(PluginLoadError) as info:
        _single(tmp_path, wat)
    assert "plugin 'test.plugin'" in str(info.value)
    assert problem in str(info.value)


def test_binary_wasm_modules_load(tmp_path: Path, workspace: Path) -> None:
    import wasmtime

    directory = make_plugin(tmp_path / "plugins", "test.binary", "", module="module.wasm")
    (directory / "module.wasm").write_bytes(
        wasmtime.wat2wasm('(module (memory (export "memory") 1) (func (export "_start")))')
    )
    catalog = ToolCatalog([load_plugins(tmp_path / "plugins", ToolsConfig())])
    assert _run(catalog, "test.binary", workspace).ok


def test_unknown_manifest_key_names_key_and_file(tmp_path: Path) -> None:
    directory = make_plugin(tmp_path / "plugins", "test.plugin", LOOP, colour="blue")
    with pytest.raises(ManifestError) as info:
        load_plugins(tmp_path / "plugins", ToolsConfig())
    assert str(info.value) == f"{directory / 'manifest.toml'}: unknown key `colour`"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"capabilities": ["net.egress"]}, "cannot be granted to WASM plugins"),
        ({"capabilities": ["fs.read"]}, "needs workspace_subdir"),
        ({"workspace_subdir": "x"}, "needs capability fs.read or fs.write"),
        ({"fuel": 10**13}, "fuel: 10000000000000 exceeds the ceiling"),
        ({"risk": "extreme"}, "at `$.risk`"),
        ({"module": "../x.wat"}, "at `$.module`"),
        ({"name": "NoDots"}, "at `$.name`"),
    ],
)
def test_manifest_problems_are_named(tmp_path: Path, fields: dict[str, Any], problem: str) -> None:
    make_plugin(tmp_path / "plugins", "test.plugin", LOOP, **fields)
    with pytest.raises(ManifestError, match=r"manifest\.toml: ") as info:
        load_plugins(tmp_path / "plugins", ToolsConfig())
    assert problem in str(info.value)


def test_unsupported_schema_keyword_is_named(tmp_path: Path) -> None:
    directory = make_plugin(tmp_path / "plugins", "test.plugin", LOOP)
    with (directory / "manifest.toml").open("a") as f:
        f.write(
            '[arguments]\ntype = "object"\n[arguments.properties.when]\n'
            'type = "string"\nformat = "date-time"\n'
        )
    with pytest.raises(
        ManifestError, match=r"arguments\.properties\.when\.format: unsupported schema keyword"
    ):
        load_plugins(tmp_path / "plugins", ToolsConfig())


def test_missing_module_file(tmp_path: Path) -> None:
    directory = make_plugin(tmp_path / "plugins", "test.plugin", LOOP)
    (directory / "module.wat").unlink()
    with pytest.raises(PluginLoadError, match="cannot read module"):
        load_plugins(tmp_path / "plugins", ToolsConfig())


# --- hostile: links out of a granted subdir -------------------------------------------------

OPEN_AND_APPEND = """(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "PATH")
  (data (i32.const 200) " PWNED")
  (func (export "_start") (local $err i32)
    (local.set $err (call $open (i32.const 3) (i32.const 1) (i32.const 16) (i32.const LEN)
      (i32.const 0) (i64.const 64) (i64.const 64) (i32.const 1) (i32.const 64)))
    (if (local.get $err) (then (call $exit (local.get $err))))
    (i32.store (i32.const 0) (i32.const 200))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $write (i32.load (i32.const 64)) (i32.const 0) (i32.const 1) (i32.const 8)))))"""
"""Opens PATH for appending (fdflags APPEND, following symlinks) and writes " PWNED"."""

WASI_LOOKUP_SYMLINK_FOLLOW = 1


def _append_wat(path: str) -> str:
    return OPEN_AND_APPEND.replace("PATH", path).replace("LEN", str(len(path)))


def _follow(wat: str) -> str:
    """The read module, asking WASI to follow symlinks (path_open's lookup flags)."""
    return wat.replace(
        "(call $open (i32.const 3) (i32.const 0)",
        f"(call $open (i32.const 3) (i32.const {WASI_LOOKUP_SYMLINK_FOLLOW})",
    )


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "secret.txt"
    path.write_text("top secret")
    return path


def _grant(tmp_path: Path, wat: str, *caps: str) -> ToolCatalog:
    return _single(
        tmp_path / "p", wat, capabilities=list(caps or ("fs.read",)), workspace_subdir="data"
    )


def _link(target: Path, link: Path) -> None:
    try:
        os.link(target, link)
    except OSError as exc:
        pytest.skip(f"hard links not possible here: {exc}")


def test_a_plugin_cannot_append_through_a_hard_link(
    tmp_path: Path, workspace: Path, secret: Path
) -> None:
    (workspace / "data").mkdir()
    _link(secret, workspace / "data" / "h")
    catalog = _grant(tmp_path, _append_wat("h"), "fs.read", "fs.write")
    result = _run(catalog, "test.plugin", workspace)
    assert (result.ok, result.error_kind) == (False, "denied")
    assert "data/h: has 2 hard links" in (result.error or "")
    assert secret.read_text() == "top secret"


def test_a_plugin_cannot_read_through_a_hard_link(
    tmp_path: Path, workspace: Path, secret: Path
) -> None:
    (workspace / "data" / "deep").mkdir(parents=True)
    _link(secret, workspace / "data" / "deep" / "h")
    result = _run(_grant(tmp_path, _open_wat("deep/h")), "test.plugin", workspace)
    assert result.error_kind == "denied" and "top secret" not in result.output


@pytest.mark.parametrize("target", ["ABS", "../../outside/secret.txt", "..", "sub/../.."])
def test_outward_symlinks_in_the_grant_refuse_the_call(
    tmp_path: Path, workspace: Path, secret: Path, target: str
) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "l").symlink_to(str(secret) if target == "ABS" else target)
    result = _run(_grant(tmp_path, _follow(_open_wat("l"))), "test.plugin", workspace)
    assert result.error_kind == "denied" and "may point outside the grant" in (result.error or "")
    assert "top secret" not in result.output


def test_wasmtime_itself_refuses_outward_symlinks(
    tmp_path: Path, workspace: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The layer under the scan: with the scan switched off, wasmtime's WASI (cap-std) still
    refuses to follow an absolute or climbing symlink out of the preopen (EPERM)."""
    import tools.wasm

    monkeypatch.setattr(tools.wasm, "scan_tree", lambda *a: None)
    (workspace / "data").mkdir()
    (workspace / "data" / "abs").symlink_to(secret)
    (workspace / "data" / "rel").symlink_to("../../outside/secret.txt")
    for name in ("abs", "rel"):
        result = _run(_grant(tmp_path / name, _follow(_open_wat(name))), "test.plugin", workspace)
        assert result.error == f"exited with status {WASI_ERRNO_PERM}", name
        assert "top secret" not in result.output


def test_an_inward_symlink_is_fine(tmp_path: Path, workspace: Path) -> None:
    (workspace / "data").mkdir()
    (workspace / "data" / "real.txt").write_text("inside")
    (workspace / "data" / "alias").symlink_to("real.txt")
    result = _run(_grant(tmp_path, _follow(_open_wat("alias"))), "test.plugin", workspace)
    assert (result.ok, result.output) == (True, "inside")


def test_a_symlinked_grant_directory_is_refused(
    tmp_path: Path, workspace: Path, secret: Path
) -> None:
    (workspace / "data").symlink_to(secret.parent)
    result = _run(_grant(tmp_path, _open_wat("secret.txt")), "test.plugin", workspace)
    assert result.error_kind == "denied" and "top secret" not in result.output


def test_the_grant_cannot_be_swapped_after_the_scan(
    tmp_path: Path, workspace: Path, secret: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TOCTOU on the grant itself: after the vetted directory is opened and scanned, ``data``
    is replaced by a symlink to the outside; the plugin still gets the vetted directory."""
    import tools.wasm
    from tools.workspace import scan_tree

    (workspace / "data").mkdir()
    (workspace / "data" / "secret.txt").write_text("vetted")

    def scan_then_swap(fd: int, max_entries: int, shown: str) -> None:
        scan_tree(fd, max_entries, shown)
        (workspace / "data").rename(workspace / "parked")
        (workspace / "data").symlink_to(secret.parent)

    monkeypatch.setattr(tools.wasm, "scan_tree", scan_then_swap)
    result = _run(_grant(tmp_path, _open_wat("secret.txt")), "test.plugin", workspace)
    assert (result.ok, result.output) == (True, "vetted")


def test_a_grant_too_large_to_vet_is_refused(tmp_path: Path, workspace: Path) -> None:
    (workspace / "data").mkdir()
    for i in range(5):
        (workspace / "data" / f"f{i}").write_text("")
    root = tmp_path / "plugins"
    make_plugin(
        root,
        "test.plugin",
        _open_wat("f0"),
        capabilities=["fs.read"],
        workspace_subdir="data",
    )
    catalog = ToolCatalog([load_plugins(root, ToolsConfig(wasm_preopen_max_entries=3))])
    result = _run(catalog, "test.plugin", workspace)
    assert result.error_kind == "denied" and "more than 3 entries" in (result.error or "")


class _Listed(list[os.DirEntry[str]]):
    """A directory listing already read, usable as ``os.scandir``'s context manager."""

    def __enter__(self) -> _Listed:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("swap", ["file removed", "directory removed", "symlink removed"])
def test_an_entry_swapped_during_the_scan_refuses_the_call(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    """The race, made deterministic: the grant's listing is read, then an entry goes away
    before the scan looks at it (a concurrent ``shell.run`` or another process). The call is
    refused as ``denied`` naming the entry, never an unexpected error."""
    data = workspace / "data"
    (data / "sub").mkdir(parents=True)
    (data / "f").write_text("x")
    (data / "l").symlink_to("f")
    gone = {"file removed": data / "f", "directory removed": data / "sub", "symlink removed": None}
    real_scandir, real_readlink = os.scandir, os.readlink
    raced: list[str] = []

    def scandir_then_swap(path: Any) -> _Listed:
        with real_scandir(path) as entries:
            listed = _Listed(entries)
        victim = gone[swap]
        if victim is not None and not raced and any(e.name == victim.name for e in listed):
            victim.rmdir() if victim.is_dir() else victim.unlink()
            raced.append(victim.name)
        return listed

    def unlink_then_readlink(path: str, *, dir_fd: int | None = None) -> str:
        if swap == "symlink removed" and not raced:
            (data / "l").unlink()
            raced.append("l")
        return real_readlink(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "scandir", scandir_then_swap)
    monkeypatch.setattr(os, "readlink", unlink_then_readlink)
    result = _run(_grant(tmp_path, _open_wat("f")), "test.plugin", workspace)
    assert raced, "the swap did not happen"
    assert (result.ok, result.error_kind) == (False, "denied"), result
    assert f"data/{raced[0]}: changed while it was being vetted" in (result.error or "")
