from __future__ import annotations

import os
import threading
from pathlib import Path

import msgspec
import pytest

from tests.tools.sandboxkit import survivors, unique_seconds
from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.shell import ShellRuntime

ALLOW = ("env", "sleep", "sh", "python3", "cat", "pwd", "echo", "false")
WRAPPERS = ("env", "sh", "python3")
"""Exec wrappers these tests run on purpose (allowed explicitly, as an operator would)."""

pytestmark = pytest.mark.usefixtures("sandbox_required")


def _catalog(**config: object) -> ToolCatalog:
    config.setdefault("shell_allowlist", ALLOW)
    config.setdefault("shell_allowed_wrappers", WRAPPERS)
    return ToolCatalog([ShellRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]


def _run(
    workspace: Path,
    arguments: dict[str, object],
    timeout_s: float = 20,
    ctx: ExecutionContext | None = None,
    **config: object,
) -> ToolResult:
    catalog = _catalog(**config)
    return catalog.execute(
        "shell.run",
        catalog.validate("shell.run", arguments),
        ctx or ExecutionContext.start(workspace, timeout_s),
    )


def _body(result: ToolResult) -> dict[str, object]:
    body: dict[str, object] = msgspec.json.decode(result.output)
    return body


class TestShellConformance(RuntimeConformance):
    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return _catalog()

    def quick_call(self, workspace: Path) -> Call:
        return ("shell.run", {"argv": ["echo", "hi"]})

    def slow_call(self, workspace: Path) -> Call:
        return ("shell.run", {"argv": ["sleep", "60"]})


def test_runs_with_arguments_and_stdin(workspace: Path) -> None:
    result = _run(workspace, {"argv": ["cat"], "stdin": "from stdin"})
    assert result.ok, result.error
    assert _body(result)["stdout"] == "from stdin"
    assert _body(result)["exit_code"] == 0


def test_nothing_runs_by_default(workspace: Path) -> None:
    result = _run(workspace, {"argv": ["echo", "x"]}, shell_allowlist=())
    assert (result.error_kind, result.error) == (
        "denied",
        "argv[0]: 'echo' is not in the shell allowlist",
    )


@pytest.mark.parametrize("argv0", ["/bin/echo", "./echo", "../echo", "bin/echo"])
def test_paths_as_argv0_are_denied(workspace: Path, argv0: str) -> None:
    result = _run(workspace, {"argv": [argv0]})
    assert result.error_kind == "denied"
    assert "bare executable name" in (result.error or "")


def test_unlisted_program_is_denied(workspace: Path) -> None:
    assert _run(workspace, {"argv": ["rm", "-rf", "x"]}).error_kind == "denied"


def test_environment_is_scrubbed(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REEL_TEST_SECRET", "hunter2")
    monkeypatch.setenv("PATH", f"{workspace}:{os.environ['PATH']}")
    result = _run(workspace, {"argv": ["env"]})
    lines = sorted(str(_body(result)["stdout"]).splitlines())
    assert lines == [  # PWD: bwrap sets it with --chdir
        "HOME=/workspace",
        "LANG=C.UTF-8",
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "PWD=/workspace",
    ]


def test_argv0_is_resolved_on_the_fixed_path(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = workspace / "echo"
    fake.write_text("#!/bin/sh\necho hijacked\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(workspace))
    result = _run(workspace, {"argv": ["echo", "real"]})
    assert _body(result)["stdout"] == "real\n"


def test_cwd_is_confined_to_the_workspace(workspace: Path) -> None:
    (workspace / "sub").mkdir()
    inside = _run(workspace, {"argv": ["pwd"], "cwd": "sub"})
    assert _body(inside)["stdout"] == "/workspace/sub\n"
    assert _run(workspace, {"argv": ["pwd"], "cwd": ".."}).error_kind == "denied"
    (workspace / "out").symlink_to("/tmp")
    assert _run(workspace, {"argv": ["pwd"], "cwd": "out"}).error_kind == "denied"


def test_non_zero_exit_is_a_failure_with_output(workspace: Path) -> None:
    result = _run(workspace, {"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
    assert (result.ok, result.error_kind, result.error) == (False, "failed", "exited with status 3")
    body = _body(result)
    assert (body["stdout"], body["stderr"], body["exit_code"]) == ("out\n", "err\n", 3)


@pytest.mark.timeout(20)
def test_cpu_limit_kills_a_busy_loop(workspace: Path) -> None:
    # The write bound counts every writer of the file system (tools/write_bound.py): another
    # test writing 64 MiB to it during this call would stop it first. This one is about CPU.
    loop: dict[str, object] = {"argv": ["python3", "-c", "while True: pass"]}
    result = _run(workspace, loop, shell_cpu_s=1, shell_write_bytes=1 << 40)
    assert (result.error_kind, result.error) == ("limit", "CPU time limit of 1 s exceeded")
    assert _body(result)["signal"] in ("SIGXCPU", "SIGKILL")


def test_memory_limit_refuses_a_large_allocation(workspace: Path) -> None:
    program = "b = bytearray(512 * 1024 * 1024); print('allocated')"
    result = _run(
        workspace, {"argv": ["python3", "-c", program]}, shell_memory_bytes=256 * 1024 * 1024
    )
    assert result.error_kind == "failed"
    assert "MemoryError" in str(_body(result)["stderr"])
    assert "allocated" not in str(_body(result)["stdout"])


def test_file_size_limit(workspace: Path) -> None:
    program = "open('f', 'wb').write(b'x' * 100000)"
    result = _run(workspace, {"argv": ["python3", "-c", program]}, shell_file_size_bytes=1000)
    assert not result.ok
    assert (workspace / "f").stat().st_size <= 1000


def test_output_cap_kills_and_truncates(workspace: Path) -> None:
    program = "import sys\nwhile True: sys.stdout.write('y' * 4096)"
    result = _run(workspace, {"argv": ["python3", "-c", program]}, shell_output_cap_bytes=10000)
    assert (result.error_kind, result.truncated) == ("limit", True)
    body = _body(result)
    assert body["stdout"] == "y" * 10000 and body["stdout_truncated"] is True
    assert body["signal"] == "SIGKILL"


def test_non_utf8_output_is_replaced_and_marked(workspace: Path) -> None:
    program = "import sys; sys.stdout.buffer.write(bytes([111, 107, 255, 254]))"
    result = _run(workspace, {"argv": ["python3", "-c", program]})
    assert result.ok and result.lossy
    assert _body(result)["stdout"] == "ok\ufffd\ufffd"


@pytest.mark.timeout(20)
def test_timeout_kills_everything_the_call_started(workspace: Path) -> None:
    marker = unique_seconds()
    script = f"sleep {marker} & echo started; sleep 300"
    result = _run(workspace, {"argv": ["sh", "-c", script]}, timeout_s=0.5)
    assert result.error_kind == "timeout"
    body = _body(result)
    assert body["timed_out"] is True and body["stdout"] == "started\n"
    assert survivors(marker) == []


def test_leftover_children_die_when_the_command_exits(workspace: Path) -> None:
    marker = unique_seconds()
    result = _run(workspace, {"argv": ["sh", "-c", f"sleep {marker} & echo started"]})
    assert result.ok, result.error
    assert _body(result)["stdout"] == "started\n"
    assert survivors(marker) == []


@pytest.mark.timeout(20)
def test_cancel_kills_everything_the_call_started(workspace: Path) -> None:
    marker = unique_seconds()
    ctx = ExecutionContext.start(workspace, 60)
    threading.Timer(0.3, ctx.cancel.set).start()
    script = f"sleep {marker} & echo started; wait"
    result = _run(workspace, {"argv": ["sh", "-c", script]}, ctx=ctx)
    assert result.error_kind == "cancelled"
    assert _body(result)["cancelled"] is True and _body(result)["stdout"] == "started\n"
    assert survivors(marker) == []


def test_stdin_over_the_cap_is_refused(workspace: Path) -> None:
    result = _run(workspace, {"argv": ["cat"], "stdin": "x" * 11}, shell_stdin_cap_bytes=10)
    assert (result.error_kind, result.error) == ("limit", "stdin: exceeds the cap of 10 bytes")
