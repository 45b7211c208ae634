"""Restart equivalence: a run killed with ``kill -9`` in each state it can be in ends exactly as
docs/operations.md ("After a crash") says, after a real process dies and a node starts again on
the same data dir.

- Waiting for a human (approval decided live after the restart, decided offline with
  ``reel approvals`` while the node is down, or timed out while it was down): the run resumes,
  and its tape, minus ids and times, equals the tape of the same run without a crash.
- Anything else (queued, streaming a turn, running a tool, being cancelled): the run fails
  ``interrupted``, its open tool call completed ``interrupted`` first.

Every scenario also ends with ``reel journal verify`` and ``reel replay`` passing, and exactly
one terminal event, last in the tape.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.messages import ResolveApproval, StartRun
from events import JournalReader
from events.lifecycle import is_terminal
from tests.actors import restart_child
from transports.runtime import Runtime, open_runtime

CHILD = Path(restart_child.__file__)
REEL = str(Path(sys.executable).with_name("reel"))
VARYING = frozenset(
    {
        "run_id",
        "session_id",
        "invocation_id",
        "approval_id",
        "expires_at_ms",
        "waited_ms",
        "duration_ms",
    }
)
"""Fields that differ between two runs of the same conversation (ids and times)."""


def crash_in(scenario: str, data: Path) -> dict[str, str]:
    """Run the child until the scenario's state, then ``kill -9`` it."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), scenario, str(data)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, f"the child ended before reaching {scenario}"
        ids: dict[str, str] = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    return ids


def reel(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([REEL, *args], capture_output=True, text=True, timeout=60)


def tape(runtime: Runtime, run_id: str) -> list[Any]:
    return [s.decode() for s in runtime.journal.read_correlated(run_id)]


def wait_end(runtime: Runtime, run_id: str) -> list[Any]:
    deadline = time.monotonic() + 20
    while True:
        kinds = [s.kind for s in runtime.journal.read_correlated(run_id)]
        if kinds and is_terminal(kinds[-1]):
            return tape(runtime, run_id)
        assert time.monotonic() < deadline, f"run {run_id} did not end: {kinds}"
        time.sleep(0.02)


def wait_pending(runtime: Runtime, run_id: str) -> str:
    deadline = time.monotonic() + 20
    while True:
        for event in tape(runtime, run_id):
            if type(event).__name__ == "ApprovalRequested":
                return str(event.approval_id)
        assert time.monotonic() < deadline, "no approval requested"
        time.sleep(0.02)


def shape(events: list[Any], *, cli_decided: bool = False) -> list[dict[str, Any]]:
    """The tape minus ids and times (``decided_by`` too when one side decided offline: the
    CLI records ``cli``, a live client its own principal)."""
    out = []
    for event in events:
        fields = {k: v for k, v in msgspec.to_builtins(event).items() if k not in VARYING}
        if cli_decided and fields.get("kind") == "tool.approval_resolved":
            fields.pop("decided_by")
        out.append(fields)
    return out


def audited(data: Path, run_id: str) -> list[Any]:
    """After the node stopped: the journal verifies, replay matches, one terminal event, last."""
    verify = reel("journal", "verify", "--data", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    replay = reel("replay", "--data", str(data))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    reader = JournalReader.open(data / "journal.db")
    try:
        events = [s.decode() for s in reader.read_correlated(run_id)]
    finally:
        reader.close()
    kinds = [msgspec.to_builtins(e)["kind"] for e in events]
    assert sum(map(is_terminal, kinds)) == 1 and is_terminal(kinds[-1]), kinds
    return events


def decide(runtime: Runtime, approval_id: str) -> None:
    runtime.node.ask(ResolveApproval(approval_id=approval_id, decision="allow", principal="op"))


def reference(tmp_path: Path, scenario: str) -> list[Any]:
    """The same approval run without a crash, decided the same way."""
    data = tmp_path / "reference"
    runtime = open_runtime(data, config=restart_child.config(scenario))
    try:
        ticket = runtime.node.ask(StartRun(text=restart_child.APPROVAL, create=True))
        approval_id = wait_pending(runtime, ticket.run_id)
        if scenario != "timeout":
            decide(runtime, approval_id)
        return wait_end(runtime, ticket.run_id)
    finally:
        runtime.close(grace_s=0)


@pytest.mark.parametrize("scenario", ["live", "offline", "timeout"])
def test_a_run_waiting_for_a_human_resumes_as_if_nothing_happened(
    tmp_path: Path, scenario: str
) -> None:
    data = tmp_path / "crashed"
    run_id = crash_in(scenario, data)["run"]
    if scenario == "offline":
        approval = json.loads(reel("approvals", "list", "--json", "--data", str(data)).stdout)
        assert [a["run_id"] for a in approval] == [run_id]
        approved = reel("approvals", "approve", approval[0]["approval_id"], "--data", str(data))
        assert approved.returncode == 0, approved.stderr
    if scenario == "timeout":
        time.sleep(restart_child.TIMEOUT_S)  # the approval expires while the node is down
    runtime = open_runtime(data, config=restart_child.config(scenario))
    try:
        assert [r.state.run_id for r in runtime.node.recovery.resumed] == [run_id]
        if scenario == "live":
            decide(runtime, wait_pending(runtime, run_id))
        wait_end(runtime, run_id)
    finally:
        runtime.close(grace_s=0)
    after = audited(data, run_id)
    expected = reference(tmp_path, scenario)
    assert shape(after, cli_decided=scenario == "offline") == shape(
        expected, cli_decided=scenario == "offline"
    )
    resolved = [e for e in after if type(e).__name__ == "ApprovalResolved"]
    assert [r.decision for r in resolved] == ["deny" if scenario == "timeout" else "allow"]
    if scenario == "timeout":
        assert resolved[0].reason == "timeout" and resolved[0].decided_by == "node"


@pytest.mark.parametrize("scenario", ["queued", "streaming", "tool", "cancelling"])
def test_machine_work_cut_off_by_the_crash_fails_interrupted(tmp_path: Path, scenario: str) -> None:
    data = tmp_path / "crashed"
    ids = crash_in(scenario, data)
    run_id = ids["run"]
    runtime = open_runtime(data, config=restart_child.config(scenario))
    try:
        assert runtime.node.recovery.resumed == ()
        assert run_id in runtime.node.recovery.interrupted_runs or scenario == "cancelling"
    finally:
        runtime.close(grace_s=0)
    events = audited(data, run_id)
    end = events[-1]
    kinds = [msgspec.to_builtins(e)["kind"] for e in events]
    if scenario == "cancelling" and type(end).__name__ == "RunCancelled":
        return  # the cancel was recorded before the kill: nothing was left in flight
    assert type(end).__name__ == "RunFailed" and end.reason == "interrupted", kinds
    if scenario == "queued":
        assert kinds == ["run.accepted", "run.failed"]
        assert "first" in ids and ids["first"] in runtime.node.recovery.interrupted_runs
    if scenario == "streaming":
        assert "run.output" in kinds and "run.turn_completed" not in kinds
    if scenario in ("tool", "cancelling"):
        completed = [e for e in events if type(e).__name__ == "ToolCompleted"]
        assert [c.error_kind for c in completed] == ["interrupted"]
        assert kinds.index("tool.completed") < kinds.index("run.failed")
