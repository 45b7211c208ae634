"""Run shell.run from a node that is not root: a child process as uid 65534 (``setpriv``).

The child's code is staged in a directory that user can read, never imported from the
checkout: a checkout whose parent is private (root's home, a ``mktemp -d`` directory) cannot
be read by uid 65534, and Python silently drops a ``PYTHONPATH`` entry it cannot read (issue
28). `stage` copies the ``tools`` package and the few installed modules it imports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

NOBODY = 65534
PYTHON = "/usr/bin/python3.11"
"""The system interpreter (the checkout's venv interpreter may lie in a private directory)."""
SETPRIV = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")

CHILD = """
import json, pathlib, sys
from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.shell import ShellRuntime
job = json.load(sys.stdin)
workspace = pathlib.Path(job["workspace"])
runtime = ShellRuntime(ToolsConfig(workspace_dir=str(workspace), **job["config"]))
report = {"unavailable": runtime.unavailable, "results": []}
catalog = ToolCatalog([runtime])
for call in job["calls"]:
    args = catalog.validate("shell.run", call)
    result = catalog.execute("shell.run", args, ExecutionContext.start(workspace, job["timeout"]))
    report["results"].append(
        {"ok": result.ok, "output": result.output, "error": result.error,
         "error_kind": result.error_kind}
    )
print(json.dumps(report))
"""


@dataclass(frozen=True)
class Outcome:
    """One call's result, as the child saw it."""

    ok: bool
    output: str
    error: str | None
    error_kind: str | None


def unavailable() -> str | None:
    """Why a child cannot run as uid 65534 here, or None."""
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux)"
    if not os.access(PYTHON, os.X_OK):
        return f"needs the system interpreter {PYTHON}"
    return None


def stage(public: Path) -> Path:
    """Copy what the child imports into ``public/lib`` (modes kept: readable by all)."""
    import pyseccomp
    import typing_extensions

    lib = public / "lib"
    lib.mkdir(mode=0o755)
    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "tools", lib / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(Path(msgspec.__file__).parent, lib / "msgspec")
    for module in (typing_extensions, pyseccomp):
        shutil.copy(str(module.__file__), lib)
    for path in (lib, *lib.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return lib


def node_dirs(public: Path, canary: str) -> tuple[Path, Path]:
    """A data dir (mode 0700, with a token holding ``canary``) and its workspace, both owned
    by the unprivileged node's user."""
    data = public / "data"
    workspace = data / "workspace"
    workspace.mkdir(parents=True)
    (data / "admin.token").write_text(canary)
    for path in (data, workspace, data / "admin.token"):
        os.chown(path, NOBODY, NOBODY)
    data.chmod(0o700)
    return data, workspace


def run_as_nobody(
    lib: Path,
    workspace: Path,
    calls: list[dict[str, Any]],
    timeout_s: float = 20,
    **config: Any,
) -> tuple[str | None, list[Outcome]]:
    """(why shell.run is unavailable or None, each call's outcome) in a node run as 65534;
    ``calls`` are shell.run arguments (``{"argv": [...], "stdin": ...}``)."""
    job = {"workspace": str(workspace), "config": config, "calls": calls, "timeout": timeout_s}
    done = subprocess.run(
        [*SETPRIV, PYTHON, "-s", "-c", CHILD],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(lib), "HOME": str(workspace)},
        cwd="/",
    )
    if done.returncode != 0:
        raise AssertionError(f"the unprivileged node failed: {done.stderr.strip()[-2000:]}")
    report = json.loads(done.stdout)
    return report["unavailable"], [Outcome(**r) for r in report["results"]]
