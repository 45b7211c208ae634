"""The MCP test servers' code where the sandbox can bind it, wherever the checkout lives.

A server's ``read_only_paths`` may not lie under /tmp (the sandbox mounts a private /tmp over
it: tools/mcp/runtime.py refuses them), and the sandbox's unprivileged user must be able to read
them; a checkout in a ``mktemp -d`` or under /root fails both. So each pytest process copies
what the servers run (their venv, their scripts, the npm reference server) once into a fresh
0755 directory under /var/tmp, removed at exit, and the tests name those copies."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

BASE = Path("/var/tmp")


@functools.cache
def public_dir() -> Path:
    """A directory of this process's, outside /tmp, that every user may search."""
    root = Path(tempfile.mkdtemp(prefix="reel-mcp-", dir=BASE))
    root.chmod(0o755)
    atexit.register(shutil.rmtree, root, True)
    return root


@functools.cache
def staged(source: Path) -> Path:
    """A copy of ``source`` (a directory; links kept as links) readable by every user."""
    target = public_dir() / source.name
    shutil.copytree(source, target, symlinks=True)
    for path in (target, *target.rglob("*")):
        if not path.is_symlink():
            executable = path.is_dir() or os.access(path, os.X_OK)
            path.chmod(0o755 if executable else 0o644)
    return target
