"""The run's fold (``actors.runs.state``): pure functions on values, no actors, no journal."""

from __future__ import annotations

import pytest

from actors import IllegalTransition
from actors.aggregate import fold
from actors.provider import ToolCall
from actors.runs import state as run_fold
from actors.runs.state import RunState, Turn, apply, check, initial, start
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunOutput,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.lifecycle import RunEnd, RunStatus

RUN = "r1"
SESSION = "s1"
RUN_STREAM = f"run/{RUN}"
ACCEPTED = RunAccepted(run_id=RUN, session_id=SESSION, text="hello [REDACTED]", channel="cli")


def on_run(event: Event, at_ms: int = 0) -> Recorded:
    return Recorded(event, RUN_STREAM, at_ms)


def on_tool(event: Event, invocation_id: str = "i1", at_ms: int = 0) -> Recorded:
    return Recorded(event, f"tool/{invocation_id}", at_ms)


def run_started(max_turns: int = 4, max_tool_calls: int = 3, wall_clock_s: float = 60.0) -> Event:
    return RunStarted(
        run_id=RUN, max_turns=max_turns, max_tool_calls=max_tool_calls, wall_clock_s=wall_clock_s
    )


def turn_completed(
    turn: int, *calls: dict[str, str], prompt: int = 0, completion: int = 0
) -> Event:
    return RunTurnCompleted(
        run_id=RUN,
        turn=turn,
        prompt_tokens=prompt,
        completion_tokens=completion,
        tool_calls=len(calls),
        finish_reason="tool_calls" if calls else "stop",
        calls=calls,
    )


def proposed(call_id: str, invocation_id: str, tool: str = "echo") -> ToolProposed:
    return ToolProposed(
        invocation_id=invocation_id,
        run_id=RUN,
        session_id=SESSION,
        call_id=call_id,
        tool=tool,
        arguments={},
    )


def done(invocation_id: str, output: str = "ok") -> ToolCompleted:
    return ToolCompleted(
        invocation_id=invocation_id, run_id=RUN, tool="echo", ok=True, output=output
    )


def requested(approval_id: str, invocation_id: str = "i1") -> ApprovalRequested:
    return ApprovalRequested(
        approval_id=approval_id,
        invocation_id=invocation_id,
        run_id=RUN,
        session_id=SESSION,
        tool="shell",
        arguments={"cmd": "ls"},
        risk="high",
        reason="ask_each_time",
    )


def resolved(
    approval_id: str,
    decision: str = "allow",
    scope: str = "once",
    tool: str = "shell",
    invocation_id: str = "i1",
) -> ApprovalResolved:
    return ApprovalResolved(
        approval_id=approval_id,
        invocation_id=invocation_id,
        run_id=RUN,
        decision=decision,  # type: ignore[arg-type]
        scope=scope,  # type: ignore[arg-type]
        decided_by="alice",
        tool=tool,
    )


def folded(*tape: Recorded) -> RunState:
    state = fold(run_fold, tape, start(ACCEPTED, "alice"))
    assert state is not None
    return state


# --- start ------------------------------------------------------------------------------------


def test_start_takes_the_accepted_message() -> None:
    state = start(ACCEPTED, "alice")
    assert (state.run_id, state.session_id, state.principal) == (RUN, SESSION, "alice")
    assert (state.channel, state.text) == ("cli", "hello [REDACTED]")
    assert state.status is RunStatus.ACCEPTED
    assert state.next_seq == 0 and state.turns == () and state.end is None
    assert state.stream == RUN_STREAM


def test_fold_of_an_empty_tape_is_start() -> None:
    assert folded() == start(ACCEPTED, "alice")


def test_the_run_accepted_on_the_session_stream_starts_the_fold() -> None:
    accepted = Recorded(ACCEPTED, f"session/{SESSION}", 5, "alice")
    state = fold(run_fold, [accepted, on_run(run_started())])
    assert state is not None
    assert state.status is RunStatus.IN_PROGRESS
    assert state.next_seq == 1
    assert initial(accepted) == start(ACCEPTED, "alice")


def test_nothing_but_a_run_accepted_on_its_session_stream_starts_a_run() -> None:
    assert initial(on_run(run_started())) is None
    assert initial(Recorded(ACCEPTED, RUN_STREAM, 0, "alice")) is None
    assert fold(run_fold, [on_run(run_started())]) is None


def test_a_second_run_accepted_is_refused_before_it_is_appended_and_folds_to_nothing() -> None:
    state = start(ACCEPTED, "alice")
    with pytest.raises(IllegalTransition):
        check(state, [ACCEPTED])
    assert apply(state, Recorded(ACCEPTED, f"session/{SESSION}", 0)) == state


# --- next_seq ---------------------------------------------------------------------------------


def test_next_seq_counts_only_events_on_the_run_stream() -> None:
    state = folded(
        on_run(run_started()),
        on_run(RunOutput(run_id=RUN, turn=1, text="a")),
        on_run(turn_completed(1, {"id": "c1", "name": "shell", "arguments": "{}"})),
        on_tool(proposed("c1", "i1")),
        on_tool(
            ToolDecided(invocation_id="i1", run_id=RUN, tool="shell", outcome="allow", reason="")
        ),
        on_tool(requested("a1")),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1")),
        Recorded(resolved("a1"), "approval/a1", 0),
        on_run(RunResumed(run_id=RUN, approval_id="a1")),
        on_tool(done("i1")),
        # another run's stream with a similar name does not count either
        Recorded(RunOutput(run_id="r10", turn=1, text="x"), "run/r10", 0),
    )
    assert state.next_seq == 5


def test_next_seq_counts_events_that_do_not_change_anything_else() -> None:
    state = folded(on_run(run_started()), on_run(RunOutput(run_id=RUN, turn=1, text="")))
    assert state.next_seq == 2


# --- budgets, output and turns ----------------------------------------------------------------


def test_budgets_come_from_run_started() -> None:
    state = folded(on_run(run_started(max_turns=7, max_tool_calls=11, wall_clock_s=2.5)))
    assert (state.max_turns, state.max_tool_calls, state.wall_clock_s) == (7, 11, 2.5)
    assert state.status is RunStatus.IN_PROGRESS


def test_output_chunks_join_into_the_turn_text_and_reset() -> None:
    state = folded(
        on_run(run_started()),
        on_run(RunOutput(run_id=RUN, turn=1, text="Hel")),
        on_run(RunOutput(run_id=RUN, turn=1, text="lo ")),
    )
    assert state.output == ("Hel", "lo ")
    assert state.turns == ()
    state = apply(state, on_run(turn_completed(1, prompt=10, completion=3)))
    assert state.turns == (Turn(number=1, text="Hello ", calls=()),)
    assert state.output == ()
    state = apply(state, on_run(RunOutput(run_id=RUN, turn=2, text="again")))
    assert state.output == ("again",)
    assert state.turns[-1].text == "Hello "


def test_a_turn_without_output_has_empty_text() -> None:
    state = folded(on_run(run_started()), on_run(turn_completed(1)))
    assert state.turns == (Turn(number=1, text="", calls=()),)


def test_token_usage_adds_up_over_turns() -> None:
    state = folded(
        on_run(run_started()),
        on_run(
            turn_completed(
                1, {"id": "c1", "name": "echo", "arguments": ""}, prompt=10, completion=3
            )
        ),
        on_run(turn_completed(2, prompt=20, completion=4)),
    )
    assert (state.prompt_tokens, state.completion_tokens) == (30, 7)
    assert [t.number for t in state.turns] == [1, 2]


def test_calls_are_parsed_from_run_turn_completed() -> None:
    state = folded(
        on_run(run_started()),
        on_run(
            turn_completed(
                1,
                {"id": "c1", "name": "fs.read", "arguments": '{"path": "/etc"}'},
                {"id": "c2", "name": "echo", "arguments": "not json"},
                {"name": "odd"},  # missing keys become empty strings
            )
        ),
    )
    assert state.turns[0].calls == (
        ToolCall(id="c1", name="fs.read", arguments='{"path": "/etc"}'),
        ToolCall(id="c2", name="echo", arguments="not json"),
        ToolCall(id="", name="odd", arguments=""),
    )
    assert state.open_call() == ToolCall(id="c1", name="fs.read", arguments='{"path": "/etc"}')


# --- invocations and results ------------------------------------------------------------------


def test_invocations_and_results_are_keyed_by_call_id() -> None:
    state = folded(
        on_run(run_started()),
        on_run(
            turn_completed(
                1,
                {"id": "c1", "name": "echo", "arguments": "{}"},
                {"id": "c2", "name": "echo", "arguments": "{}"},
            )
        ),
        on_tool(proposed("c1", "i1"), "i1"),
        on_tool(done("i1", "one"), "i1"),
        on_tool(proposed("c2", "i2"), "i2"),
    )
    assert state.invocations == (("c1", "i1"), ("c2", "i2"))
    assert state.tool_calls == 2
    assert state.invocation_of("c1") == "i1" and state.invocation_of("c2") == "i2"
    assert state.invocation_of("c3") is None
    result = state.result_of("c1")
    assert result is not None and result.output == "one"
    assert state.result_of("c2") is None
    assert state.open_call() == ToolCall(id="c2", name="echo", arguments="{}")

    state = apply(state, on_tool(done("i2", "two"), "i2"))
    assert [(call, r.output) for call, r in state.results] == [("c1", "one"), ("c2", "two")]
    assert state.open_call() is None


def test_a_result_for_an_unknown_invocation_is_ignored() -> None:
    before = folded(on_run(run_started()), on_tool(proposed("c1", "i1")))
    after = apply(before, on_tool(done("nobody"), "nobody"))
    assert after == before


# --- approvals --------------------------------------------------------------------------------


def _awaiting_tape() -> list[Recorded]:
    return [
        on_run(run_started()),
        on_run(turn_completed(1, {"id": "c1", "name": "shell", "arguments": "{}"})),
        on_tool(proposed("c1", "i1", "shell")),
        on_tool(requested("a1")),
    ]


def test_approval_requested_sets_the_approval_id() -> None:
    state = folded(*_awaiting_tape())
    assert state.approval_id == "a1"
    assert state.resolved is None


@pytest.mark.parametrize("stream", ["tool/i1", "approval/a1"])
def test_approval_resolved_clears_it_and_records_the_decision(stream: str) -> None:
    state = folded(*_awaiting_tape(), on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1")))
    seq = state.next_seq
    decision = resolved("a1", "deny")
    state = apply(state, Recorded(decision, stream, 0))
    assert state.approval_id is None
    assert state.resolved == decision
    assert state.next_seq == seq  # neither stream is the run's
    assert state.status is RunStatus.AWAITING_APPROVAL


def test_run_awaiting_approval_records_which_approval_the_run_marked() -> None:
    state = folded(*_awaiting_tape())
    assert state.marked is None
    state = apply(state, on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1")))
    assert (state.marked, state.approval_id) == ("a1", "a1")
    # the mark outlives the decision: it tells a decision taken before the mark from one after
    state = apply(state, on_tool(resolved("a1")))
    assert state.marked == "a1"


def test_a_decision_on_another_approval_is_ignored() -> None:
    state = folded(*_awaiting_tape())
    assert apply(state, on_tool(resolved("a-other"))) == state


def test_tool_completed_clears_the_decision() -> None:
    state = folded(
        *_awaiting_tape(),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1")),
        on_tool(resolved("a1")),
        on_run(RunResumed(run_id=RUN, approval_id="a1")),
    )
    assert state.resolved is not None
    state = apply(state, on_tool(done("i1")))
    assert state.resolved is None and state.approval_id is None


def test_a_new_request_forgets_an_earlier_decision() -> None:
    state = folded(*_awaiting_tape(), on_tool(resolved("a1")))
    assert state.resolved is not None
    state = apply(state, on_tool(requested("a2", "i2"), "i2"))
    assert (state.approval_id, state.resolved) == ("a2", None)


@pytest.mark.parametrize(
    ("decision", "scope", "tool", "grants"),
    [
        ("allow", "session", "shell", (("shell", "a1"),)),
        ("allow", "once", "shell", ()),
        ("allow", "always", "shell", ()),
        ("deny", "session", "shell", ()),
        ("allow", "session", "", ()),
    ],
)
def test_session_grants_only_on_allow_with_scope_session(
    decision: str, scope: str, tool: str, grants: tuple[tuple[str, str], ...]
) -> None:
    state = folded(*_awaiting_tape(), on_tool(resolved("a1", decision, scope, tool)))
    assert [(g.tool, g.approval_id) for g in state.session_grants] == list(grants)


def test_session_grants_accumulate_over_the_run() -> None:
    state = folded(
        *_awaiting_tape(),
        Recorded(resolved("a1", "allow", "session", "shell"), "approval/a1", 0),
        on_tool(done("i1")),
        on_tool(requested("a2", "i2"), "i2"),
        on_tool(resolved("a2", "allow", "session", "fs.write", "i2"), "i2"),
    )
    assert [(g.tool, g.approval_id) for g in state.session_grants] == [
        ("shell", "a1"),
        ("fs.write", "a2"),
    ]


# --- wall clock -------------------------------------------------------------------------------


def test_wall_clock_counts_only_time_in_progress() -> None:
    state = folded(on_run(run_started(), at_ms=1_000))
    assert (state.spent_ms, state.since_ms) == (0, 1_000)
    assert state.spent_s(1_500) == 0.5
    assert state.spent_s() == 0.0  # without a reading, only what was banked

    state = apply(state, on_run(RunOutput(run_id=RUN, turn=1, text="x"), at_ms=2_000))
    assert (state.spent_ms, state.since_ms) == (0, 1_000)  # no status change, no clock change

    state = apply(state, on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1"), at_ms=3_000))
    assert (state.spent_ms, state.since_ms) == (2_000, None)
    assert state.spent_s(1_000_000) == 2.0  # waiting for a human costs nothing

    state = apply(state, on_run(RunResumed(run_id=RUN, approval_id="a1"), at_ms=60_000))
    assert (state.spent_ms, state.since_ms) == (2_000, 60_000)
    assert state.spent_s(60_250) == 2.25

    state = apply(state, on_run(RunCompleted(run_id=RUN, answer="x"), at_ms=60_500))
    assert (state.spent_ms, state.since_ms) == (2_500, None)
    assert state.spent_s(99_999) == 2.5


def test_ending_while_awaiting_adds_no_time() -> None:
    state = folded(
        on_run(run_started(), at_ms=0),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1"), at_ms=100),
        on_run(RunFailed(run_id=RUN, reason="interrupted"), at_ms=50_000),
    )
    assert (state.spent_ms, state.since_ms) == (100, None)


def test_a_run_cancelled_before_it_started_spent_nothing() -> None:
    state = folded(on_run(RunCancelled(run_id=RUN, requested_by="bob"), at_ms=9_000))
    assert (state.spent_ms, state.since_ms) == (0, None)
    assert state.status is RunStatus.CANCELLED


def test_a_clock_going_backwards_never_spends_negative_time() -> None:
    state = folded(
        on_run(run_started(), at_ms=5_000),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1"), at_ms=4_000),
    )
    assert state.spent_ms == 0
    assert folded(on_run(run_started(), at_ms=5_000)).spent_s(4_000) == 0.0


# --- the end ----------------------------------------------------------------------------------

ENDS: list[tuple[RunEnd, RunStatus]] = [
    (RunCompleted(run_id=RUN, answer="42", turns=1), RunStatus.DONE),
    (RunFailed(run_id=RUN, reason="max_turns", message="used up"), RunStatus.FAILED),
    (RunCancelled(run_id=RUN, requested_by="bob"), RunStatus.CANCELLED),
]


@pytest.mark.parametrize(("ending", "status"), ENDS, ids=lambda v: type(v).__name__)
def test_each_terminal_kind_sets_end(ending: RunEnd, status: RunStatus) -> None:
    state = folded(on_run(run_started()), on_run(ending))
    assert state.end == ending
    assert state.status is status
    assert state.status.terminal


@pytest.mark.parametrize(("ending", "status"), ENDS[1:], ids=lambda v: type(v).__name__)
def test_a_run_can_end_while_awaiting(ending: RunEnd, status: RunStatus) -> None:
    # (awaiting -> done is illegal: see ILLEGAL below)
    state = folded(
        on_run(run_started()),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1")),
        on_run(ending),
    )
    assert (state.end, state.status) == (ending, status)


def test_no_end_while_running() -> None:
    state = folded(on_run(run_started()), on_run(turn_completed(1)))
    assert state.end is None and not state.status.terminal


# --- illegal histories ------------------------------------------------------------------------

STARTED = on_run(run_started())
AWAIT = on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1"))
RESUMED = on_run(RunResumed(run_id=RUN, approval_id="a1"))
COMPLETED = on_run(RunCompleted(run_id=RUN, answer="x"))
FAILED = on_run(RunFailed(run_id=RUN, reason="wall_clock"))

ILLEGAL: dict[str, list[Recorded]] = {
    "started twice": [STARTED, STARTED],
    "awaiting before started": [AWAIT],
    "completed before started": [COMPLETED],
    "resumed while in progress": [STARTED, RESUMED],
    "awaiting twice": [STARTED, AWAIT, AWAIT],
    "completed while awaiting": [STARTED, AWAIT, COMPLETED],
    "anything after completed": [STARTED, COMPLETED, FAILED],
    "started after failed": [STARTED, FAILED, STARTED],
    "resumed after failed": [STARTED, AWAIT, FAILED, RESUMED],
}


@pytest.mark.parametrize("tape", ILLEGAL.values(), ids=ILLEGAL.keys())
def test_illegal_histories_are_refused_before_the_append_and_ignored_by_the_fold(
    tape: list[Recorded],
) -> None:
    """The run actor checks every batch before it appends it (``check``): the illegal last
    record is never written. The fold is total: given one anyway, it keeps the status."""
    before = folded(*tape[:-1])
    with pytest.raises(IllegalTransition):
        check(before, [tape[-1].event])
    after = folded(*tape)
    assert after.status is before.status
    assert after.next_seq == before.next_seq + 1


def test_the_fold_is_deterministic() -> None:
    tape = [
        *_awaiting_tape(),
        on_run(RunAwaitingApproval(run_id=RUN, approval_id="a1"), at_ms=7),
        Recorded(resolved("a1", "allow", "session"), "approval/a1", 9),
        on_run(RunResumed(run_id=RUN, approval_id="a1"), at_ms=12),
    ]
    assert folded(*tape) == folded(*tape)
    state = start(ACCEPTED, "alice")
    for rec in tape:
        state = apply(state, rec)
    assert state == folded(*tape)
