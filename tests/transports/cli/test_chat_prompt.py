"""Audit truth at ``reel chat``'s approval prompt, against a real node over gRPC.

The chat is the real console script in a subprocess; its stdin is a terminal (a pty), a pipe
left open, a closed pipe, ``/dev/null``, or a terminal that hangs up. Nobody types. Whatever
stdin is:

- the end of input or a lost terminal is never a decision: chat says it leaves the approval
  pending and exits 4, the journal holds no resolution, and the console can still decide it;
- an approval decided elsewhere (another operator) or timed out while chat waits at the prompt
  closes the prompt; chat follows the run to its end and exits, never hanging on its stdin and
  never dying at exit (``Fatal Python error: _enter_buffered_busy``, exit 134).
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from actors.messages import ResolveApproval
from events.catalog import ApprovalResolved, kind_of
from tests.transports.grpc.conftest import SHELL_ECHO, GrpcNode, start_node
from transports.cli.errors import EXIT_OK, EXIT_PENDING
from transports.config import (
    ApprovalsConfig,
    GrpcConfig,
    NodeConfig,
    ToolsSection,
)
from transports.grpc import start_grpc
from transports.runtime import open_runtime

REEL = Path(sys.executable).with_name("reel")
NEEDED = re.compile(r"approval ([0-9A-Z]{26}) needed")
RUN = re.compile(r"^run ([0-9A-Z]{26}) \(session", re.MULTILINE)
PATIENCE_S = 60.0
"""Only there so a hanging chat fails the test instead of stalling the suite."""

TERMINAL, OPEN_PIPE, CLOSED_PIPE, DEV_NULL, HUNG_UP = (
    "terminal",
    "open-pipe",
    "closed-pipe",
    "dev-null",
    "hung-up-terminal",
)
WAITING = (TERMINAL, OPEN_PIPE)
"""Stdins on which nothing arrives and nothing ends: chat waits at the prompt."""
ENDED = (CLOSED_PIPE, DEV_NULL)
"""Stdins that end at once: the prompt gets no answer."""


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcNode]:
    started = start_node(tmp_path_factory.mktemp("prompt-node"))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcNode]:
    """A node whose approvals time out after a second."""
    data = tmp_path_factory.mktemp("impatient-node")
    config = NodeConfig(
        grpc=GrpcConfig(port=0),
        tools=ToolsSection(shell_allowlist=("echo",)),
        approvals=ApprovalsConfig(timeout_s=1.0),
    )
    runtime = open_runtime(data, config=config)
    try:
        server = start_grpc(runtime, port=0)
    except BaseException:
        runtime.close(grace_s=0)
        raise
    started = GrpcNode(data, runtime, server, (data / "admin.token").read_text().strip())
    try:
        yield started
    finally:
        started.close()


class Chat:
    """``reel chat SHELL_ECHO`` in a subprocess with the given stdin; its output is collected
    as it comes."""

    def __init__(self, node: GrpcNode, stdin: str) -> None:
        self.stdin = stdin
        self.terminal: int | None = None
        self.writer: int | None = None
        source: int
        if stdin in (TERMINAL, HUNG_UP):
            self.terminal, source = pty.openpty()
        elif stdin == DEV_NULL:
            source = subprocess.DEVNULL
        else:
            source, self.writer = os.pipe()
        self.process = subprocess.Popen(
            [
                str(REEL),
                "chat",
                "--data",
                str(node.data_dir),
                "--address",
                node.address,
                SHELL_ECHO,
            ],
            stdin=source,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if source != subprocess.DEVNULL:
            os.close(source)
        if stdin == CLOSED_PIPE and self.writer is not None:
            os.close(self.writer)
            self.writer = None
        self.out = bytearray()
        self.err = bytearray()
        self.grew = threading.Condition()
        self.readers = [
            threading.Thread(target=self._collect, args=(pipe, buffer), daemon=True)
            for pipe, buffer in ((self.process.stdout, self.out), (self.process.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    def _collect(self, pipe: IO[bytes] | None, buffer: bytearray) -> None:
        assert pipe is not None
        while chunk := os.read(pipe.fileno(), 4096):
            with self.grew:
                buffer.extend(chunk)
                self.grew.notify_all()
        with self.grew:
            self.grew.notify_all()

    @property
    def stdout(self) -> str:
        return self.out.decode()

    @property
    def stderr(self) -> str:
        return self.err.decode()

    def saw(self, text: str) -> str:
        """Wait until stdout holds ``text`` (or chat ended); returns stdout."""
        with self.grew:
            self.grew.wait_for(
                lambda: text in self.stdout or self.process.poll() is not None, PATIENCE_S
            )
        assert text in self.stdout, self.stdout + self.stderr
        return self.stdout

    def approval_id(self) -> str:
        match = NEEDED.search(self.saw(" needed ("))
        assert match, self.stdout
        return match.group(1)

    def hang_up(self) -> None:
        """The terminal goes away (the SSH connection dropped)."""
        assert self.terminal is not None
        os.close(self.terminal)
        self.terminal = None

    def exit_code(self) -> int:
        """Chat's exit code: it must exit on its own, with nothing more typed."""
        try:
            code = self.process.wait(PATIENCE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"chat hangs with stdin {self.stdin}: {self.stdout}")
        for reader in self.readers:
            reader.join(PATIENCE_S)
        assert "Fatal Python error" not in self.stderr and "Traceback" not in self.stderr
        assert code >= 0, f"chat died of signal {-code}: {self.stderr}"
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for fd in (self.terminal, self.writer):
            if fd is not None:
                os.close(fd)


@pytest.fixture
def chats() -> Iterator[list[Chat]]:
    started: list[Chat] = []
    try:
        yield started
    finally:
        for chat in started:
            chat.close()


def resolutions(node: GrpcNode, approval_id: str) -> list[ApprovalResolved]:
    found = []
    for stored in node.runtime.journal.events_of_kinds((kind_of(ApprovalResolved),)):
        event = stored.decode()
        assert isinstance(event, ApprovalResolved)
        if event.approval_id == approval_id:
            found.append(event)
    return found


def decide_elsewhere(node: GrpcNode, approval_id: str) -> None:
    """Another operator (here the node itself, as its console would) allows it."""
    node.runtime.node.ask(
        ResolveApproval(approval_id=approval_id, decision="allow", principal="user:carol")
    )


def run_done(node: GrpcNode, chat: Chat) -> None:
    """The run chat started goes on to its end on the node."""
    match = RUN.search(chat.stdout)
    assert match, chat.stdout
    journal = node.runtime.journal
    head = journal.committed_position
    while not any(e.kind == "run.completed" for e in journal.read_correlated(match.group(1))):
        moved = journal.wait_for(head, timeout=PATIENCE_S)
        assert moved > head, f"run {match.group(1)} stalled before its end"
        head = moved


@pytest.mark.parametrize("stdin", [*ENDED, HUNG_UP])
def test_no_answer_is_never_a_decision(node: GrpcNode, chats: list[Chat], stdin: str) -> None:
    chat = Chat(node, stdin)
    chats.append(chat)
    approval_id = chat.approval_id()
    if stdin == HUNG_UP:
        chat.saw("choice: ")
        chat.hang_up()
    assert chat.exit_code() == EXIT_PENDING, chat.stdout + chat.stderr
    assert f"approval {approval_id} left pending" in chat.stdout
    assert f"reel approvals approve|deny {approval_id}" in chat.stdout
    assert "approval: deny" not in chat.stdout
    assert approval_id in node.runtime.node.services.registry.pending_approvals()
    assert resolutions(node, approval_id) == [], "a decision was recorded for nobody's answer"
    # it waits for the console (or the CLI, or its time-out), as it should
    decide_elsewhere(node, approval_id)
    run_done(node, chat)
    (resolved,) = resolutions(node, approval_id)
    assert (resolved.decision, resolved.decided_by) == ("allow", "user:carol")


@pytest.mark.parametrize("stdin", [*WAITING, *ENDED])
def test_a_decision_made_elsewhere_never_hangs_or_crashes_chat(
    node: GrpcNode, chats: list[Chat], stdin: str
) -> None:
    chat = Chat(node, stdin)
    chats.append(chat)
    approval_id = chat.approval_id()
    if stdin in WAITING:
        chat.saw("choice: ")  # sitting at the prompt
        decide_elsewhere(node, approval_id)
        assert chat.exit_code() == EXIT_OK, chat.stdout + chat.stderr
        assert "(decided elsewhere; no answer needed)" in chat.stdout
        assert "approval: allow once by user:carol" in chat.stdout
        assert "<- shell.run:" in chat.stdout and "run done" in chat.stdout
    else:  # the prompt ended before anyone decided: left pending, decided after chat left
        assert chat.exit_code() == EXIT_PENDING, chat.stdout + chat.stderr
        decide_elsewhere(node, approval_id)
        run_done(node, chat)
    (resolved,) = resolutions(node, approval_id)
    assert resolved.decided_by == "user:carol"


@pytest.mark.parametrize("stdin", [*WAITING, *ENDED])
def test_an_approval_that_times_out_never_hangs_or_crashes_chat(
    impatient: GrpcNode, chats: list[Chat], stdin: str
) -> None:
    chat = Chat(impatient, stdin)
    chats.append(chat)
    approval_id = chat.approval_id()
    code = chat.exit_code()
    # An ended stdin usually leaves it pending first (exit 4; the time-out decides it on the
    # node after chat left); on a slow machine the time-out may come first. Either way the
    # time-out is recorded as the node's, never as a decision of the token's owner.
    if stdin in WAITING or code == EXIT_OK:
        assert code == EXIT_OK, chat.stdout + chat.stderr
        assert "(decided elsewhere; no answer needed)" in chat.stdout
        assert "approval: deny once by node" in chat.stdout and "run done" in chat.stdout
    else:
        assert code == EXIT_PENDING, chat.stdout + chat.stderr
        assert f"approval {approval_id} left pending" in chat.stdout
        run_done(impatient, chat)
    (resolved,) = resolutions(impatient, approval_id)
    assert (resolved.decision, resolved.decided_by, resolved.reason) == ("deny", "node", "timeout")
