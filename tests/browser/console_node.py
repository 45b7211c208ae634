"""What the browser tests share: where Chromium is and how to launch it, where screenshots go,
and a real node serving the HTTP API (and so the console) on a free loopback port.

(A module of its own rather than ``conftest``: test modules import from it by a name no other
test directory uses.)
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transports.auth import load_or_create_token
from transports.config import LearningSection, NodeConfig, ToolsSection
from transports.http import HttpServer, start_http
from transports.runtime import Runtime, open_runtime

CHROMIUM = Path("/usr/bin/chromium")
"""Debian's chromium package (the Makefile installs it); never ``playwright install``."""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
"""Where screenshots go (git-ignored; CI keeps the directory as an artifact)."""


@dataclass
class Console:
    """A running node with its HTTP API: where the console is, and the token that opens it."""

    url: str
    token: str
    runtime: Runtime


@contextmanager
def running_console(data_dir: Path) -> Iterator[Console]:
    """A node on ``data_dir`` that may run ``echo`` through shell.run (after an approval),
    with the HTTP API on a free port of 127.0.0.1."""
    # Preferences apply without review here, so the Learning tab has applied ones to show.
    config = NodeConfig(
        tools=ToolsSection(shell_allowlist=("echo",)),
        learning=LearningSection(apply_preference_bps=8_000),
    )
    runtime = open_runtime(data_dir, config=config)
    server: HttpServer | None = None
    try:
        token = load_or_create_token(data_dir)
        server = start_http(runtime, host="127.0.0.1", port=0, token=token)
        yield Console(url=server.url, token=token, runtime=runtime)
    finally:
        try:
            if server is not None:
                server.close()
        finally:
            runtime.close(grace_s=5.0)


def call(
    console: Console, method: str, path: str, body: Any = None, token: str | None = None
) -> Any:
    """``method path`` on the console's node as ``token`` (the admin's by default): the JSON
    answer (an HTTPError for a 4xx or 5xx)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        console.url + path,
        data=data,
        method=method,
        headers={
            "Authorization": f"Bearer {token or console.token}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)
