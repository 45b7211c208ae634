"""A draining node, as the console shows it: ``reel node`` (a subprocess) gets SIGTERM while a
run is live, so it drains (``/healthz`` answers 503 ``{"status": "draining"}`` while reads
still work); the console, in headless Chromium, says "draining", not "node unreachable", and
still shows the node's data. Once the node has stopped, it says "node unreachable"."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests import processes
from tests.browser.test_console_chat import ChildOutput, RunningNode

CONFIG = """\
[http]
port = 0
[grpc]
port = 0
[runs]
drain_grace_s = 60
"""


@pytest.fixture
def node(data_dir: Path) -> Iterator[RunningNode]:
    """``reel node`` with the deterministic provider; a drain waits up to 60 s for live runs."""
    (data_dir / "config.toml").write_text(CONFIG)
    with processes.node(
        "--data",
        data_dir,
        "--provider",
        "deterministic",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        log = ChildOutput()

        def read() -> None:
            assert process.stderr is not None
            for line in process.stderr:
                log.add(line)
            log.close()

        threading.Thread(target=read, daemon=True).start()
        log.wait_for('"reel node ready"')
        ready = next(
            json.loads(line)
            for line in log.text.splitlines()
            if line.startswith("{") and json.loads(line).get("msg") == "reel node ready"
        )
        yield RunningNode(process, data_dir, ready["console"].rstrip("/"), ready["grpc"], log)


def post(node: RunningNode, path: str, body: object) -> dict[str, str]:
    request = urllib.request.Request(
        node.console + path,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {node.admin_token}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        answer: dict[str, str] = json.load(reply)
    return answer


def health(node: RunningNode) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(node.console + "/healthz", timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as refused:
        return refused.code, json.load(refused)


def test_a_draining_node_is_shown_as_draining(node: RunningNode, console_page: Page) -> None:
    page = console_page
    session = post(node, "/v1/sessions", {"label": "long one"})["session_id"]
    run_id = post(node, f"/v1/sessions/{session}/messages", {"text": "/sleep 50000\nslow"})[
        "run_id"
    ]
    page.goto(node.console + "/")
    page.get_by_test_id("token-input").fill(node.admin_token)
    page.get_by_test_id("login-button").click()
    status = page.get_by_test_id("node-status")
    expect(status).to_have_text("connected")

    node.process.send_signal(signal.SIGTERM)
    node.log.wait_for('"draining"')
    status_code, body = health(node)  # what the console reads
    assert (status_code, body["status"]) == (503, "draining")
    expect(status).to_have_text("draining")
    expect(status).to_have_attribute(
        "title",
        "The node is shutting down: live runs may finish, new sessions and runs are refused.",
    )
    # Reads still work while it drains: the live run is listed and its tape is open.
    page.get_by_test_id("nav-runs").click()
    expect(page.get_by_test_id("run-row")).to_have_attribute("data-run-id", run_id)
    page.get_by_test_id("run-row").locator(".run-link").click()
    expect(page.get_by_test_id("run-state")).to_have_text("in progress")
    expect(status).to_have_text("draining")
    # A new run is refused, and the console says why.
    page.get_by_test_id("message-input").fill("one more")
    page.get_by_test_id("send-button").click()
    expect(page.get_by_test_id("toasts")).to_contain_text("shutting down")

    # A second SIGTERM stops it at once: now the node is gone.
    node.process.send_signal(signal.SIGTERM)
    node.process.wait(30)
    expect(status).to_have_text("node unreachable", timeout=15_000)
