"""Crash and restart with real processes: a child node is SIGKILLed with runs in flight; the
data dir reopened with ``open_runtime`` resolves them from the journal.

A run busy in the provider fails ``interrupted`` (last on its tape); a run waiting for a human
is resumed with its approval still pending (actors/system/recovery.py), and a decision taken after
the restart lets it finish.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors.messages import GetSessionState, ResolveApproval, StartRun
from events import Journal, JournalReader, NodeKey, new_id, verify
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    RunAccepted,
    RunAwaitingApproval,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunTurnCompleted,
    SessionCreated,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from tests.actors.crash_child import APPROVAL_TEXT, CONFIG
from transports.runtime import Runtime, open_runtime

CHILD = Path(__file__).with_name("crash_child.py")
TERMINAL = ("run.completed", "run.failed", "run.cancelled")


def on_sqlite(runtime: Runtime) -> JournalReader:
    """The runtime's journal as the SQLite one it is here (``verify`` walks that backend)."""
    assert isinstance(runtime.journal, JournalReader)
    return runtime.journal


def read_line(process: subprocess.Popen[str], timeout: float) -> str:
    """The child's first stdout line, or fail (with its stderr) after ``timeout``."""
    assert process.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not lines or not lines[0]:
        process.kill()
        _, err = process.communicate(timeout=10)
        pytest.fail(f"the child printed nothing within {timeout} s; stderr:\n{err}")
    return lines[0]


def crash_child(data_dir: Path) -> dict[str, str]:
    """Run the child until both runs are in flight, then SIGKILL it."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ids: dict[str, str] = json.loads(read_line(process, timeout=30))
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)
    assert process.returncode == -signal.SIGKILL
    return ids


def wait_tape(runtime: Runtime, run_id: str, kind: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        head = runtime.journal.committed_position
        for stored in runtime.journal.read_correlated(run_id):
            if stored.kind == kind:
                return stored.decode()
        assert time.monotonic() < deadline, f"no {kind} in run {run_id}"
        runtime.journal.wait_for(head, timeout=0.1)


def wait_routable(runtime: Runtime, approval_id: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while runtime.node.services.registry.approval(approval_id) is None:
        assert time.monotonic() < deadline, f"approval {approval_id} never became routable"
        time.sleep(0.01)


def kinds(runtime: Runtime, run_id: str) -> list[str]:
    return [s.kind for s in runtime.journal.read_correlated(run_id)]


@pytest.fixture
def reopened(data_dir: Path) -> Iterator[tuple[dict[str, str], Runtime]]:
    ids = crash_child(data_dir)
    runtime = open_runtime(data_dir, config=CONFIG)
    try:
        yield ids, runtime
    finally:
        runtime.close(grace_s=0.5)


def test_a_run_busy_in_the_provider_fails_interrupted(
    reopened: tuple[dict[str, str], Runtime],
) -> None:
    ids, runtime = reopened
    assert runtime.node.recovery.interrupted_runs == (ids["sleeping"],)
    tape = runtime.journal.read_correlated(ids["sleeping"])
    assert [s.kind for s in tape][:2] == ["run.accepted", "run.started"]
    last = tape[-1].decode()
    assert isinstance(last, RunFailed) and last.reason == "interrupted"
    assert sum(s.kind in TERMINAL for s in tape) == 1
    report = verify(on_sqlite(runtime))
    assert report.ok, report
    # the session is usable: a new message completes
    node = runtime.node
    ticket = node.ask(StartRun(text="after the crash", session_id=ids["sleeping_session"]))
    assert not ticket.queued
    end = wait_tape(runtime, ticket.run_id, "run.completed")
    assert isinstance(end, RunCompleted) and end.answer == "after the crash"
    # the interrupted run is not part of the model's history (it never completed)
    words = len(CONFIG.runs.system_prompt.split()) + 3  # "after the crash"
    assert end.prompt_tokens == words


def test_a_run_waiting_for_approval_resumes_after_the_crash(
    reopened: tuple[dict[str, str], Runtime],
) -> None:
    ids, runtime = reopened
    node = runtime.node
    run_id = ids["waiting"]
    assert [run.state.run_id for run in node.recovery.resumed] == [run_id]
    assert run_id not in node.recovery.interrupted_runs
    assert kinds(runtime, run_id)[-1] == "run.awaiting_approval"
    request = wait_tape(runtime, run_id, "tool.approval_requested")
    assert isinstance(request, ApprovalRequested)
    wait_routable(runtime, request.approval_id)
    # a message to the same session waits behind the resumed run
    queued = node.ask(StartRun(text="next in line", session_id=ids["waiting_session"]))
    assert queued.queued
    assert node.ask(ResolveApproval(approval_id=request.approval_id, decision="allow")) is True
    end = wait_tape(runtime, run_id, "run.completed")
    assert isinstance(end, RunCompleted)
    assert "resumed" in end.answer and end.answer.startswith("needs approval")
    tape = kinds(runtime, run_id)
    assert tape[-1] == "run.completed"
    assert tape.count("tool.approval_requested") == 1  # the same approval, not a new one
    assert tape.count("tool.proposed") == 1
    done = wait_tape(runtime, queued.run_id, "run.completed")
    assert done.answer == "next in line"
    first = runtime.journal.read_correlated(run_id)[-1].position
    started = next(
        s for s in runtime.journal.read_correlated(queued.run_id) if s.kind == "run.started"
    )
    assert first < started.position
    state = node.ask(GetSessionState(session_id=ids["waiting_session"]))
    assert state.runs == (run_id, queued.run_id)
    assert verify(on_sqlite(runtime)).ok


def test_a_clean_stop_leaves_an_approval_pending_for_the_next_start(data_dir: Path) -> None:
    runtime = open_runtime(data_dir, config=CONFIG)
    try:
        ticket = runtime.node.ask(StartRun(text=APPROVAL_TEXT, create=True))
        request = wait_tape(runtime, ticket.run_id, "tool.approval_requested")
        wait_tape(runtime, ticket.run_id, "run.awaiting_approval")
    finally:
        runtime.close(grace_s=0.5)
    runtime = open_runtime(data_dir, config=CONFIG)
    try:
        assert runtime.node.recovery.interrupted_runs == ()
        wait_routable(runtime, request.approval_id)
        runtime.node.ask(ResolveApproval(approval_id=request.approval_id, decision="deny"))
        end = wait_tape(runtime, ticket.run_id, "run.completed")
        assert "shell.run -> error (denied)" in end.answer
        assert verify(on_sqlite(runtime)).ok
    finally:
        runtime.close(grace_s=0.5)


def test_a_waiting_run_that_cannot_be_resumed_fails_and_its_approval_is_closed(
    data_dir: Path,
) -> None:
    """A journal from before turns recorded their proposed calls: the run cannot be rebuilt,
    so recovery fails it ``interrupted`` and closes its approval (denied, ``interrupted``)."""
    session_id, run_id, invocation_id, approval_id = new_id(), new_id(), new_id(), new_id()
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(data_dir / "journal.db", node_key=key) as journal:
        journal.append(
            f"session/{session_id}",
            [SessionCreated(session_id=session_id)],
            expected_seq=0,
        )
        journal.append(
            f"session/{session_id}",
            [RunAccepted(run_id=run_id, session_id=session_id, text="old")],
            expected_seq=1,
            correlation_id=run_id,
        )
        journal.append(
            f"run/{run_id}",
            [
                RunStarted(run_id=run_id, max_turns=4, max_tool_calls=4, wall_clock_s=60.0),
                RunTurnCompleted(
                    run_id=run_id,
                    turn=1,
                    prompt_tokens=1,
                    completion_tokens=1,
                    tool_calls=1,
                    finish_reason="tool_calls",
                ),
            ],
            expected_seq=0,
            correlation_id=run_id,
        )
        journal.append(
            f"tool/{invocation_id}",
            [
                ToolProposed(
                    invocation_id=invocation_id,
                    run_id=run_id,
                    session_id=session_id,
                    call_id="call_1",
                    tool="shell.run",
                    arguments={"argv": ["echo"]},
                ),
                ToolDecided(
                    invocation_id=invocation_id,
                    run_id=run_id,
                    tool="shell.run",
                    outcome="approval_required",
                    reason="sensitive",
                ),
                ApprovalRequested(
                    approval_id=approval_id,
                    invocation_id=invocation_id,
                    run_id=run_id,
                    session_id=session_id,
                    tool="shell.run",
                    arguments={"argv": ["echo"]},
                    risk="critical",
                    reason="r",
                ),
            ],
            expected_seq=0,
            correlation_id=run_id,
        )
        journal.append(
            f"run/{run_id}",
            [RunAwaitingApproval(run_id=run_id, approval_id=approval_id)],
            expected_seq=2,
            correlation_id=run_id,
        )
    runtime = open_runtime(data_dir, config=CONFIG)
    try:
        recovery = runtime.node.recovery
        assert recovery.interrupted_runs == (run_id,)
        assert recovery.closed_approvals == (approval_id,)
        tape = [(s.kind, s.decode()) for s in runtime.journal.read_correlated(run_id)]
        resolved = [e for _, e in tape if isinstance(e, ApprovalResolved)]
        assert [(e.decision, e.reason) for e in resolved] == [("deny", "interrupted")]
        completed = [e for _, e in tape if isinstance(e, ToolCompleted)]
        assert [e.error_kind for e in completed] == ["interrupted"]
        kind, last = tape[-1]
        assert kind == "run.failed" and isinstance(last, RunFailed) and last.reason == "interrupted"
        assert verify(on_sqlite(runtime)).ok
        ticket = runtime.node.ask(StartRun(text="new", session_id=session_id))
        assert wait_tape(runtime, ticket.run_id, "run.completed").answer == "new"
    finally:
        runtime.close(grace_s=0.5)
