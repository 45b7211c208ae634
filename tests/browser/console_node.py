"""What the browser tests share: where Chromium is and how to launch it, where screenshots go,
and a real node serving the HTTP API (and so the console) on a free loopback port.

(A module of its own rather than ``conftest``: test modules import from it by a name no other
test directory uses.)
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.channels.config import ChannelConfig
from actors.messages import StartRun
from transports.access.auth import load_or_create_token
from transports.config import (
    ContextSection,
    LearningSection,
    NodeConfig,
    ToolsSection,
    WatchdogSection,
)
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


def eventually(check: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll ``check()`` until it is truthy (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"never came: {what}")
        time.sleep(0.05)


HOOK_SECRET_ENV = "REEL_TEST_CONSOLE_HOOK_SECRET"


@dataclass
class Stocked:
    """A console whose node has something on every page (see :func:`stocked_console`)."""

    console: Console
    tokens: dict[str, str]
    sessions: dict[str, str]
    runs: dict[str, str]


def long_message(i: int) -> str:
    return f"Message {i} of a long talk about billing. " + " ".join(f"w{i}x{k}" for k in range(14))


@contextmanager
def stocked_console(data_dir: Path) -> Iterator[Stocked]:
    """A node with something on every page of the console:

    - session ``billing`` (admin; label ``Billing incident``, key ``ops:billing``): a done run
      (``hello zebra``), a failed one (``database on fire``), long talk that was compacted (a
      checkpoint), and echo disabled in it by the admin;
    - session ``ops`` (``user:op``, an operator): a run waiting for a shell.run approval;
    - session ``slow`` (``agent:app``): a run still in progress;
    - a run of ``user:alice`` that taught a preference; a global memory item; tokens for
      user:op, agent:app and user:vera (a viewer); a resolved incident (a stalled tool call);
      a webhook channel ``hook`` that pairs senders.

    Needs ``REEL_TEST_CONSOLE_HOOK_SECRET`` in the environment (the channel's secret).
    """
    config = NodeConfig(
        tools=ToolsSection(shell_allowlist=("echo",)),
        learning=LearningSection(apply_preference_bps=8_000),
        context=ContextSection(budget_tokens=600, compact_at=0.75, cooldown_s=3600.0),
        watchdog=WatchdogSection(run_stall_s=0.5, interval_s=0.1),
        channels={
            "hook": ChannelConfig(kind="webhook", secret_env=HOOK_SECRET_ENV, dm_policy="pairing")
        },
    )
    runtime = open_runtime(data_dir, config=config)
    server: HttpServer | None = None
    try:
        token = load_or_create_token(data_dir)
        server = start_http(runtime, host="127.0.0.1", port=0, token=token)
        console = Console(url=server.url, token=token, runtime=runtime)
        yield stock(console)
    finally:
        try:
            if server is not None:
                server.close()
        finally:
            runtime.close(grace_s=0.5)  # the slow run never ends: the drain cancels it


def stock(console: Console) -> Stocked:
    node = console.runtime.node
    tokens = {
        principal: call(console, "POST", "/v1/tokens", {"principal": principal, "roles": [role]})[
            "token"
        ]
        for principal, role in (
            ("user:op", "operator"),
            ("agent:app", "agent"),
            ("user:vera", "viewer"),
        )
    }

    def ended(run_id: str) -> str:
        eventually(
            lambda: call(console, "GET", f"/v1/runs/{run_id}")["ended_at_ms"],
            f"the end of {run_id}",
        )
        return run_id

    def run(session_id: str, text: str, token: str | None = None) -> str:
        started = call(
            console, "POST", f"/v1/sessions/{session_id}/messages", {"text": text}, token
        )
        run_id: str = started["run_id"]
        return run_id

    billing = call(
        console, "POST", "/v1/sessions", {"label": "Billing incident", "session_key": "ops:billing"}
    )["session_id"]
    runs = {"zebra": ended(run(billing, "hello zebra"))}
    runs["failed"] = ended(run(billing, "/fail database on fire"))
    for i in range(4):
        ended(run(billing, long_message(i)))
    eventually(
        lambda: call(console, "GET", f"/v1/sessions/{billing}/checkpoints")["items"], "a checkpoint"
    )
    call(
        console, "POST", f"/v1/sessions/{billing}/postures", {"tool": "echo", "posture": "disabled"}
    )

    ops = call(console, "POST", "/v1/sessions", {"label": "deploy review"}, tokens["user:op"])
    runs["waiting"] = run(
        ops["session_id"], 'ship it\n/tool shell.run {"argv": ["echo", "yo"]}', tokens["user:op"]
    )
    slow = call(console, "POST", "/v1/sessions", {"label": "slow one"}, tokens["agent:app"])
    runs["live"] = run(slow["session_id"], "/sleep 60000\nslow", tokens["agent:app"])

    stalled = ended(run(billing, '/tool sleep {"seconds": 1.5}'))
    eventually(lambda: call(console, "GET", "/v1/incidents?state=resolved")["items"], "an incident")
    runs["stalled"] = stalled

    taught = node.ask(
        StartRun(text="I prefer tables", create=True, principal="user:alice"), timeout=10
    )
    runs["taught"] = ended(taught.run_id)
    eventually(
        lambda: call(console, "GET", "/v1/learning/candidates?status=applied")["items"],
        "a learning",
    )
    call(
        console,
        "POST",
        "/v1/memory",
        {"text": "Staging runs PostgreSQL 16", "scope": "global", "tags": ["db"]},
    )
    eventually(
        lambda: call(console, "GET", f"/v1/runs/{runs['waiting']}")["state"] == "awaiting_approval",
        "the approval",
    )
    return Stocked(
        console=console,
        tokens=tokens,
        sessions={"billing": billing, "ops": ops["session_id"], "slow": slow["session_id"]},
        runs=runs,
    )
