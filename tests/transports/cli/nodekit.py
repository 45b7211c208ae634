"""A real ``reel node`` process for CLI tests: started as a user starts it, on loopback ports of
the kernel's choosing (``REEL_HTTP_PORT=0``, ``REEL_GRPC_PORT=0``; client commands find it
through its ``node.json``), stopped with Ctrl-C's SIGINT and required to drain and exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests import processes
from tests.processes import REEL, spawned, stop


def bare_environment(**extra: str) -> dict[str, str]:
    """This process's environment without any ``REEL_*`` of the caller's, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("REEL_")}, **extra}


def environment(**extra: str) -> dict[str, str]:
    """:func:`bare_environment` with loopback ports of the kernel's choosing, plus ``extra``."""
    return bare_environment(REEL_HTTP_PORT="0", REEL_GRPC_PORT="0", **extra)


@contextmanager
def running_node(
    argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``argv`` (a ``reel node`` command line) until the block ends; yields its ready
    line."""
    with spawned(
        argv,
        cwd=cwd,
        env=env if env is not None else environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as node:
        assert node.stdout is not None
        ready = node.stdout.readline()
        assert ready.startswith("reel node ready"), ready
        try:
            yield ready.rstrip("\n")
        finally:
            assert stop(node) == 0


def reel(
    *args: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """One ``reel`` command as a user types it (stdin: ``stdin``, else /dev/null)."""
    return processes.run(
        [str(REEL), *args],
        cwd=cwd,
        env=env if env is not None else environment(),
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def api(data: Path, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """``(status, decoded JSON)`` of one request to the node holding ``data``, with its admin
    token."""
    found = json.loads((data / "node.json").read_text())
    token = (data / "admin.token").read_text().strip()
    request = urllib.request.Request(
        f"http://{found['http_host']}:{found['http_port']}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())
