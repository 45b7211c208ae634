"""Regressions from the review of the actor system: each test failed before its fix."""

from __future__ import annotations

import time

import pytest

import actors.sessions.actor as session_module
from actors.aggregate import fold
from actors.messages import BranchSession, CancelRun, ResolveApproval, StartRun
from actors.runs import state as run_fold
from actors.stream import recorded
from events import JournalReader
from events.catalog import RunAccepted, SessionGrantAdded
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import NodeKit
from tests.events.decoded import decoded


def test_a_cancelled_queued_run_leaves_no_live_route(kit: NodeKit) -> None:
    registry = kit.node.services.registry
    for _ in range(10):
        first = kit.start_run("/sleep 200\nhi")
        second = kit.start_run("second", session_id=first.session_id)
        assert second.queued
        kit.ask(CancelRun(run_id=second.run_id))
        kit.wait_for_end(second.run_id)
        kit.wait_for_end(first.run_id)
        kit.wait_until(lambda: not registry.live_runs(), 5.0, "no live runs")
    assert registry.live_run(second.run_id) is None


def test_a_session_grant_names_its_approval(kit: NodeKit) -> None:
    ticket = kit.start_run('go\n/tool shell.run {"argv": ["echo", "hi"]}')
    request = kit.wait_for_approval(ticket.run_id)
    kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow", scope="session"))
    kit.wait_for_end(ticket.run_id)
    grants = [
        decoded(s, SessionGrantAdded)
        for s in kit.journal.read_stream(f"session/{ticket.session_id}")
        if s.kind == "session.grant_added"
    ]
    assert [g.approval_id for g in grants] == [request.approval_id]


def test_commands_queued_behind_a_failing_session_command_are_answered(
    make_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(self: object, message: object) -> None:
        time.sleep(0.2)
        raise RuntimeError("injected")

    monkeypatch.setattr(session_module.SessionActor, "_branch", boom)
    kit = make_node()
    ticket, _ = kit.run("hello")
    branch = kit.node.send(BranchSession(session_id=ticket.session_id, run_id=ticket.run_id))
    after = kit.node.send(StartRun(session_id=ticket.session_id, text="queued behind it"))
    with pytest.raises(RuntimeError, match="injected"):
        branch.result(timeout=10)
    assert after.result(timeout=10).session_id == ticket.session_id


def test_wall_clock_spent_before_a_restart_is_counted(kit: NodeKit) -> None:
    ticket = kit.start_run('/sleep 300\n/tool shell.run {"argv": ["echo", "x"]}')
    kit.wait_for_kind(ticket.run_id, "run.awaiting_approval")
    reader = JournalReader.open(kit.journal.path)
    try:
        tape = reader.read_correlated(ticket.run_id)
    finally:
        reader.close()
    assert isinstance(tape[0].decode(), RunAccepted)
    state = fold(run_fold, recorded(tape))
    assert state is not None
    assert state.since_ms is None  # awaiting approval: the clock is paused
    assert state.spent_s() >= 0.25  # the provider slept 300 ms while the run was in progress
