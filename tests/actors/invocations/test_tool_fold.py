"""A tool invocation's fold (``actors.invocations.state``): pure functions on values."""

from __future__ import annotations

from actors.invocations.state import InvocationState, apply, approval_stream, fold_invocations
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunOutput,
    RunStarted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)

RUN = "r1"


def proposed(invocation_id: str = "i1", call_id: str = "c1") -> ToolProposed:
    return ToolProposed(
        invocation_id=invocation_id,
        run_id=RUN,
        session_id="s1",
        call_id=call_id,
        tool="shell",
        arguments={"cmd": "ls"},
    )


def decided(invocation_id: str = "i1", outcome: str = "approval_required") -> ToolDecided:
    return ToolDecided(
        invocation_id=invocation_id,
        run_id=RUN,
        tool="shell",
        outcome=outcome,  # type: ignore[arg-type]
        reason="ask_each_time",
    )


def requested(invocation_id: str = "i1", approval_id: str = "a1") -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=approval_id,
        invocation_id=invocation_id,
        run_id=RUN,
        session_id="s1",
        tool="shell",
        arguments={"cmd": "ls"},
        risk="high",
        reason="ask_each_time",
    )


def resolved(invocation_id: str = "i1", approval_id: str = "a1") -> ApprovalResolved:
    return ApprovalResolved(
        approval_id=approval_id, invocation_id=invocation_id, run_id=RUN, decision="allow"
    )


def completed(invocation_id: str = "i1") -> ToolCompleted:
    return ToolCompleted(invocation_id=invocation_id, run_id=RUN, tool="shell", ok=True, output="x")


def on_tool(event: Event, invocation_id: str = "i1", at_ms: int = 0) -> Recorded:
    return Recorded(event, f"tool/{invocation_id}", at_ms)


def folded(*tape: Recorded, invocation_id: str = "i1") -> InvocationState:
    state = InvocationState(invocation_id=invocation_id)
    for rec in tape:
        state = apply(state, rec)
    return state


def test_names() -> None:
    assert InvocationState(invocation_id="i7").stream == "tool/i7"
    assert approval_stream("a7") == "approval/a7"


def test_a_new_invocation_knows_nothing() -> None:
    state = InvocationState(invocation_id="i1")
    assert state.next_seq == 0
    assert (state.proposed, state.decided, state.request, state.resolution, state.completed) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert state.pending_approval is None


def test_each_event_lands_in_its_field() -> None:
    events = [proposed(), decided(), requested(), resolved(), completed()]
    state = folded(*(on_tool(e, at_ms=100 * i) for i, e in enumerate(events)))
    assert state.proposed == events[0]
    assert state.decided == events[1]
    assert state.request == events[2]
    assert state.requested_at_ms == 200
    assert state.resolution == events[3]
    assert state.completed == events[4]
    assert state.next_seq == 5


def test_next_seq_counts_only_the_invocations_own_stream() -> None:
    state = folded(
        on_tool(proposed()),
        on_tool(decided()),
        on_tool(requested()),
        Recorded(resolved(), approval_stream("a1"), 0),
        Recorded(RunOutput(run_id=RUN, turn=1, text="x"), f"run/{RUN}", 0),
        Recorded(completed(), "tool/i10", 0),  # a look-alike stream
    )
    assert state.next_seq == 3
    assert state.resolution == resolved()  # the offline decision is folded all the same


def test_requested_at_comes_from_the_commit_time() -> None:
    state = folded(on_tool(proposed(), at_ms=10), on_tool(requested(), at_ms=12_345))
    assert state.requested_at_ms == 12_345


def test_pending_approval_from_request_until_decision() -> None:
    state = folded(on_tool(proposed()), on_tool(decided()))
    assert state.pending_approval is None
    state = apply(state, on_tool(requested()))
    assert state.pending_approval == requested()
    assert apply(state, on_tool(resolved())).pending_approval is None
    assert apply(state, Recorded(resolved(), "approval/a1", 0)).pending_approval is None
    assert apply(state, on_tool(completed())).pending_approval is None


def test_fold_invocations_groups_a_runs_tape_by_invocation() -> None:
    tape = [
        Recorded(
            RunStarted(run_id=RUN, max_turns=1, max_tool_calls=2, wall_clock_s=1), "run/r1", 0
        ),
        on_tool(proposed("i1", "c1"), "i1"),
        on_tool(decided("i1", "allow"), "i1"),
        on_tool(completed("i1"), "i1"),
        on_tool(proposed("i2", "c2"), "i2", at_ms=5),
        on_tool(decided("i2"), "i2"),
        on_tool(requested("i2", "a2"), "i2", at_ms=50),
        Recorded(resolved("i2", "a2"), approval_stream("a2"), 60),
    ]
    states = fold_invocations(tape)
    assert list(states) == ["i1", "i2"]
    one, two = states["i1"], states["i2"]
    assert one.completed == completed("i1") and one.next_seq == 3
    assert two.next_seq == 3
    assert two.requested_at_ms == 50
    assert two.resolution == resolved("i2", "a2")
    assert two.completed is None and two.pending_approval is None


def test_fold_invocations_skips_events_on_other_streams() -> None:
    tape = [
        on_tool(proposed()),
        # an event naming an invocation but on a run or session stream is not the invocation's
        Recorded(completed(), "run/r1", 0),
        Recorded(completed(), "session/s1", 0),
    ]
    states = fold_invocations(tape)
    assert states["i1"].completed is None
    assert states["i1"].next_seq == 1


def test_fold_invocations_of_a_tape_without_tools_is_empty() -> None:
    tape = [Recorded(RunOutput(run_id=RUN, turn=1, text="x"), "run/r1", 0)]
    assert fold_invocations(tape) == {}


def test_fold_invocations_equals_folding_each_invocation_alone() -> None:
    ones = [on_tool(proposed("i1"), "i1"), on_tool(completed("i1"), "i1", at_ms=3)]
    twos = [on_tool(proposed("i2"), "i2"), on_tool(requested("i2"), "i2", at_ms=4)]
    interleaved = [ones[0], twos[0], twos[1], ones[1]]
    states = fold_invocations(interleaved)
    assert states == {
        "i1": folded(*ones, invocation_id="i1"),
        "i2": folded(*twos, invocation_id="i2"),
    }
