"""Cancellation (mid-provider, mid-tool, queued, finished, unknown) and per-session queueing."""

from __future__ import annotations

import pytest

from actors import RunNotActive, UnknownRun
from actors.messages import CancelRun
from events import new_id
from events.catalog import RunCancelled, RunCompleted
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import TERMINAL, NodeKit
from tools import ToolsConfig


def test_cancel_during_a_provider_call_ends_the_run_cancelled(kit: NodeKit) -> None:
    ticket = kit.start_run("/sleep 10000\nslow answer")
    kit.wait_for_kind(ticket.run_id, "run.started")
    assert kit.ask(CancelRun(run_id=ticket.run_id, principal="tester")) is True
    end = kit.wait_for_end(ticket.run_id, timeout=5)
    assert isinstance(end, RunCancelled)
    assert (end.reason, end.requested_by) == ("cancelled", "tester")
    kinds = kit.kinds(ticket.run_id)
    assert kinds[-1] == "run.cancelled"
    assert "run.output" not in kinds and "run.turn_completed" not in kinds


def test_cancel_during_a_tool_stops_the_tool_and_the_end_is_last(make_node: MakeNode) -> None:
    kit = make_node(tools=ToolsConfig(sleep_cap_s=60.0))
    ticket = kit.start_run('wait\n/tool sleep {"seconds": 20}')
    kit.wait_for_kind(ticket.run_id, "tool.decided")
    kit.ask(CancelRun(run_id=ticket.run_id))
    end = kit.wait_for_end(ticket.run_id, timeout=5)
    assert isinstance(end, RunCancelled)
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert not done.ok and done.error_kind == "cancelled"
    kinds = kit.kinds(ticket.run_id)
    assert kinds[-1] == "run.cancelled"
    assert kinds.index("tool.completed") < kinds.index("run.cancelled")
    assert end.tool_calls == 1


def test_cancel_of_a_finished_run_is_refused(kit: NodeKit) -> None:
    ticket, _ = kit.run("done quickly")
    with pytest.raises(RunNotActive):
        kit.ask(CancelRun(run_id=ticket.run_id))
    assert kit.kinds(ticket.run_id)[-1] == "run.completed"


# a well-formed id no run has, under a fixed test id (xdist workers must collect the same names)
@pytest.mark.parametrize("run_id", [pytest.param(new_id(), id="ulid"), "not-a-run-id", ""])
def test_cancel_of_an_unknown_run_is_unknown_run(kit: NodeKit, run_id: str) -> None:
    with pytest.raises(UnknownRun):
        kit.ask(CancelRun(run_id=run_id))


def test_a_second_message_waits_for_the_first_run(kit: NodeKit) -> None:
    first = kit.start_run("/sleep 500\nfirst")
    second = kit.start_run("second", session_id=first.session_id)
    third = kit.start_run("third", session_id=first.session_id)
    assert not first.queued
    assert second.queued and third.queued
    assert second.session_id == third.session_id == first.session_id
    ends = [kit.wait_for_end(t.run_id) for t in (first, second, third)]
    assert [e.answer for e in ends if isinstance(e, RunCompleted)] == ["first", "second", "third"]

    def position(run_id: str, kinds: frozenset[str]) -> int:
        return next(s.position for s in kit.stored(run_id) if s.kind in kinds)

    started = frozenset({"run.started"})
    # accepted at once, durable before the caller heard back ...
    assert position(second.run_id, frozenset({"run.accepted"})) < position(first.run_id, TERMINAL)
    # ... but started only after the run before it ended, in order
    assert position(first.run_id, TERMINAL) < position(second.run_id, started)
    assert position(second.run_id, TERMINAL) < position(third.run_id, started)


def test_a_queued_run_can_be_cancelled_and_never_starts(kit: NodeKit) -> None:
    first = kit.start_run("/sleep 800\nfirst")
    queued = kit.start_run("never", session_id=first.session_id)
    after = kit.start_run("after", session_id=first.session_id)
    assert queued.queued
    assert kit.ask(CancelRun(run_id=queued.run_id, principal="tester")) is True
    end = kit.wait_for_end(queued.run_id)
    assert isinstance(end, RunCancelled) and end.requested_by == "tester"
    assert kit.kinds(queued.run_id) == ["run.accepted", "run.cancelled"]
    assert isinstance(kit.wait_for_end(first.run_id), RunCompleted)
    assert isinstance(kit.wait_for_end(after.run_id), RunCompleted)
    with pytest.raises(RunNotActive):
        kit.ask(CancelRun(run_id=queued.run_id))


def test_cancelling_the_live_run_starts_the_next_queued_one(kit: NodeKit) -> None:
    first = kit.start_run("/sleep 10000\nfirst")
    second = kit.start_run("second", session_id=first.session_id)
    kit.wait_for_kind(first.run_id, "run.started")
    kit.ask(CancelRun(run_id=first.run_id))
    assert isinstance(kit.wait_for_end(first.run_id), RunCancelled)
    end = kit.wait_for_end(second.run_id)
    assert isinstance(end, RunCompleted) and end.answer == "second"


def test_runs_of_different_sessions_do_not_queue(kit: NodeKit) -> None:
    slow = kit.start_run("/sleep 10000\nslow")
    other = kit.start_run("other")
    assert not other.queued and other.session_id != slow.session_id
    assert isinstance(kit.wait_for_end(other.run_id), RunCompleted)
    assert kit.kinds(slow.run_id)[-1] not in TERMINAL  # still sleeping
    kit.ask(CancelRun(run_id=slow.run_id))
    kit.wait_for_end(slow.run_id)


def test_cancel_right_after_the_ticket_cancels_the_run(kit: NodeKit) -> None:
    for _ in range(20):  # the window is narrow but usually hit within a few tries
        ticket = kit.start_run("/sleep 10000\nslow")
        try:
            kit.ask(CancelRun(run_id=ticket.run_id))
        except RunNotActive:
            kit.wait_for_kind(ticket.run_id, "run.started")
            kit.ask(CancelRun(run_id=ticket.run_id))
            raise
        assert isinstance(kit.wait_for_end(ticket.run_id), RunCancelled)
