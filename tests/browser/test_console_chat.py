"""``reel chat`` sitting at an approval prompt while someone approves in the console: a real
``reel node`` (a subprocess on its own data dir), ``reel chat`` on a pseudo-terminal, and an
approver in headless Chromium. Nobody types at the prompt: the chat prints who decided, drops
its prompt and finishes the run."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests import processes

REEL = Path(sys.executable).with_name("reel")
SHELL_MESSAGE = 'hi\n/tool shell.run {"argv": ["echo", "yo"]}'
CONFIG = """\
[http]
port = 0
[grpc]
port = 0
[tools]
shell_allowlist = ["echo"]
"""


class ChildOutput:
    """Text a child process writes, collected on a thread, waited for by content."""

    def __init__(self) -> None:
        self.text = ""
        self._new = threading.Condition()
        self.closed = False

    def add(self, text: str) -> None:
        with self._new:
            self.text += text
            self._new.notify_all()

    def close(self) -> None:
        with self._new:
            self.closed = True
            self._new.notify_all()

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        """The text so far, once it holds ``needle`` (an AssertionError showing it otherwise)."""
        deadline = time.monotonic() + timeout
        with self._new:
            while needle not in self.text:
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise AssertionError(f"no {needle!r} in the output:\n{self.text}")
                self._new.wait(min(left, 0.2))
            return self.text


@dataclass
class RunningNode:
    """``reel node`` in a subprocess: its console URL, gRPC address and admin token."""

    process: subprocess.Popen[str]
    data: Path
    console: str
    grpc: str
    log: ChildOutput

    @property
    def admin_token(self) -> str:
        return (self.data / "admin.token").read_text().strip()


@pytest.fixture
def node(data_dir: Path) -> Iterator[RunningNode]:
    """A node with the deterministic provider on free loopback ports; shell.run may run echo
    (after an approval)."""
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


class PtyChat:
    """``reel chat`` on a pseudo-terminal (its stdin is a tty, as a person's would be): what it
    prints is collected; nothing is ever written to it."""

    def __init__(self, argv: list[str]) -> None:
        master, slave = pty.openpty()
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True, close_fds=True
        )
        os.close(slave)
        self.master = master
        self.output = ChildOutput()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            self.output.add(chunk.decode(errors="replace"))
        self.output.close()

    def finish(self, timeout: float = 30.0) -> int:
        code = self.process.wait(timeout)
        self._reader.join(5)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        os.close(self.master)


def make_token(node: RunningNode, principal: str, role: str) -> str:
    request = urllib.request.Request(
        node.console + "/v1/tokens",
        data=json.dumps({"principal": principal, "roles": [role]}).encode(),
        headers={
            "Authorization": f"Bearer {node.admin_token}",
            "Content-Type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        token: str = json.load(reply)["token"]
    return token


def get(node: RunningNode, path: str) -> Any:
    request = urllib.request.Request(
        node.console + path, headers={"Authorization": f"Bearer {node.admin_token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def test_reel_chat_at_a_prompt_while_the_console_approves(
    node: RunningNode, console_page: Page
) -> None:
    approver = make_token(node, "user:alice", "approver")
    chat = PtyChat(
        [str(REEL), "chat", "--data", str(node.data), "--address", node.grpc, SHELL_MESSAGE]
    )
    try:
        # The chat asks at its prompt, on a terminal, and waits for a person.
        asked = chat.output.wait_for("allow shell.run?")
        assert "decision: approval_required" in asked
        run_id = asked.split("run ", 1)[1].split()[0]
        assert chat.process.poll() is None

        # Alice approves in the console, in a browser.
        page = console_page
        page.goto(node.console + "/")
        page.get_by_test_id("token-input").fill(approver)
        page.get_by_test_id("login-button").click()
        expect(page.get_by_test_id("whoami-principal")).to_have_text("user:alice")
        queue = page.get_by_test_id("approvals-list").get_by_test_id("approval")
        expect(queue).to_have_count(1)
        expect(queue).to_have_attribute("data-run-id", run_id)
        queue.locator("[data-testid=grant-option][data-scope=once]").click()
        queue.get_by_test_id("approve").click()
        expect(queue).to_have_count(0)
        expect(page.get_by_test_id("receipt").get_by_test_id("decided-by")).to_have_text(
            "by user:alice"
        )

        # Without a keystroke, the chat prints who decided, drops its prompt and finishes.
        text = chat.output.wait_for("run done")
        assert "approval: allow once by user:alice" in text
        assert "decided elsewhere" in text
        assert "<- shell.run:" in text and "yo" in text
        assert chat.finish() == 0, text
    finally:
        chat.close()

    run = get(node, f"/v1/runs/{run_id}")
    assert run["state"] == "done"
    approvals = get(node, "/v1/approvals?state=resolved")["items"]
    assert [(a["run_id"], a["decided_by"]) for a in approvals] == [(run_id, "user:alice")]
    assert approver not in node.log.text
