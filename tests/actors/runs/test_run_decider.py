"""The run's decider (``actors.runs.decide``): what a folded run does next and which events its
commands append. Pure functions on values: no actors, no journal."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.aggregate import fold
from actors.invocations.decide import refused, unknown_tool
from actors.invocations.state import fold_invocations
from actors.provider import ToolCall, Usage
from actors.runs import state as run_fold
from actors.runs.decide import (
    INTERRUPTED,
    Assemble,
    AwaitTool,
    CallModel,
    Ended,
    Finish,
    MarkAwaiting,
    ParallelCalls,
    Resume,
    Start,
    StartTool,
    Step,
    Stopping,
    WaitApproval,
    awaiting,
    end,
    finish_turn,
    interrupt,
    next_step,
    resumable,
    resumed,
    started,
)
from actors.runs.state import RunState, apply, start
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCancelRequested,
    RunCompleted,
    RunContextAssembled,
    RunFailed,
    RunOutput,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.lifecycle import TERMINAL_EVENTS, RunStatus

RUN = "r1"
SESSION = "s1"
RUN_STREAM = f"run/{RUN}"
ACCEPTED = RunAccepted(run_id=RUN, session_id=SESSION, text="what is up?")


# --- a tape builder: the events a live run appends, in journal order ------------------------


def call(n: int) -> ToolCall:
    return ToolCall(id=f"c{n}", name="shell", arguments=f'{{"n": {n}}}')


def inv(c: ToolCall) -> str:
    return f"i-{c.id}"


def aid(c: ToolCall) -> str:
    return f"a-{c.id}"


class Totals(TypedDict):
    turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int


class Steps:
    """A run's tape built append by append; ``boundaries`` are the prefix lengths that end an
    (atomic) append, the only states a live run or a recovery can observe."""

    def __init__(self, *, max_turns: int = 5, max_tool_calls: int = 10, start_run: bool = True):
        self.records: list[Recorded] = []
        self.boundaries: list[int] = [0]
        self.clock = 1_000
        self.turn = 0
        self.calls = 0
        self.prompt = 0
        self.completion = 0
        if start_run:
            self.run(
                RunStarted(
                    run_id=RUN, max_turns=max_turns, max_tool_calls=max_tool_calls, wall_clock_s=9
                )
            )
            self.run(RunContextAssembled(run_id=RUN))

    def add(self, event: Event, stream: str, *, joined: bool = False) -> Steps:
        self.clock += 10
        self.records.append(Recorded(event, stream, self.clock))
        if joined:
            self.boundaries.pop()
        self.boundaries.append(len(self.records))
        return self

    def run(self, event: Event, *, joined: bool = False) -> Steps:
        return self.add(event, RUN_STREAM, joined=joined)

    def tool(self, c: ToolCall, event: Event, *, joined: bool = False) -> Steps:
        return self.add(event, f"tool/{inv(c)}", joined=joined)

    # run events

    def model_turn(self, *calls: ToolCall, end_with: str | None = None) -> Steps:
        self.turn += 1
        self.run(RunOutput(run_id=RUN, turn=self.turn, text=f"thinking {self.turn}. "))
        self.prompt += 10
        self.completion += 2
        self.run(
            RunTurnCompleted(
                run_id=RUN,
                turn=self.turn,
                prompt_tokens=10,
                completion_tokens=2,
                tool_calls=len(calls),
                finish_reason="tool_calls" if calls else "stop",
                calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls),
            )
        )
        if end_with == "answer":
            self.run(
                RunCompleted(run_id=RUN, answer=f"thinking {self.turn}. ", **self.totals()),
                joined=True,
            )
        elif end_with == "max_tool_calls":
            self.run(RunFailed(run_id=RUN, reason="max_tool_calls", **self.totals()), joined=True)
        return self

    def totals(self) -> Totals:
        return {
            "turns": self.turn,
            "tool_calls": self.calls,
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
        }

    # tool events

    def propose(self, c: ToolCall) -> Steps:
        self.calls += 1
        return self.tool(
            c,
            ToolProposed(
                invocation_id=inv(c),
                run_id=RUN,
                session_id=SESSION,
                call_id=c.id,
                tool=c.name,
                arguments={"n": 1},
            ),
        )

    def decide(self, c: ToolCall, outcome: str) -> Steps:
        decided = ToolDecided(
            invocation_id=inv(c),
            run_id=RUN,
            tool=c.name,
            outcome=outcome,  # type: ignore[arg-type]
            reason=outcome,
        )
        return self.tool(c, decided)

    def request(self, c: ToolCall) -> Steps:
        return self.tool(
            c,
            ApprovalRequested(
                approval_id=aid(c),
                invocation_id=inv(c),
                run_id=RUN,
                session_id=SESSION,
                tool=c.name,
                arguments={"n": 1},
                risk="high",
                reason="ask",
            ),
            joined=True,
        )

    def resolve(self, c: ToolCall, decision: str = "allow", *, offline: bool = False) -> Steps:
        event = ApprovalResolved(
            approval_id=aid(c),
            invocation_id=inv(c),
            run_id=RUN,
            decision=decision,  # type: ignore[arg-type]
            scope="session" if decision == "allow" else "once",
            decided_by="cli" if offline else "alice",
            tool=c.name,
        )
        return self.add(event, f"approval/{aid(c)}" if offline else f"tool/{inv(c)}")

    def mark(self, c: ToolCall) -> Steps:
        return self.run(RunAwaitingApproval(run_id=RUN, approval_id=aid(c)))

    def resume(self, c: ToolCall) -> Steps:
        return self.run(RunResumed(run_id=RUN, approval_id=aid(c)))

    def complete(self, c: ToolCall, ok: bool = True, *, joined: bool = False) -> Steps:
        event = ToolCompleted(
            invocation_id=inv(c),
            run_id=RUN,
            tool=c.name,
            ok=ok,
            output="done" if ok else "",
            error=None if ok else "denied",
            error_kind=None if ok else "denied",
        )
        return self.tool(c, event, joined=joined)

    def outcome(self, c: ToolCall, how: str) -> Steps:
        """One call, start to finish, the way the live actors write it."""
        self.propose(c)
        if how == "allow":
            return self.decide(c, "allow").complete(c)
        if how == "deny":
            return self.decide(c, "deny").complete(c, ok=False, joined=True)
        self.decide(c, "approval_required").request(c)
        decision = "deny" if how in ("ask_deny", "timeout") else "allow"
        if how == "race":  # the decision committed before the run marked itself awaiting
            self.resolve(c, decision).mark(c)
        else:
            self.mark(c).resolve(c, decision, offline=how == "offline")
        return self.resume(c).complete(c, ok=decision == "allow")

    def state(self, upto: int | None = None) -> RunState:
        state = fold(run_fold, self.records[:upto], start(ACCEPTED, "alice"))
        assert state is not None
        return state


OUTCOMES = ("allow", "deny", "ask_allow", "ask_deny", "timeout", "offline", "race")


def build(tool_turns: list[list[str]], ending: str, last_calls: int = 1) -> Steps:
    """A complete valid tape: ``tool_turns`` (each a list of call outcomes), then the end."""
    total = sum(len(t) for t in tool_turns)
    if ending == "max_turns":
        tape = Steps(max_turns=len(tool_turns), max_tool_calls=total)
    elif ending == "max_tool_calls":
        tape = Steps(max_turns=len(tool_turns) + 1, max_tool_calls=total + last_calls - 1)
    else:
        tape = Steps(max_turns=len(tool_turns) + 1, max_tool_calls=total)
    n = 0
    for outcomes in tool_turns:
        calls = [call(n + i) for i in range(len(outcomes))]
        n += len(outcomes)
        tape.model_turn(*calls)
        for c, how in zip(calls, outcomes, strict=True):
            tape.outcome(c, how)
    if ending == "answer":
        tape.model_turn(end_with="answer")
    elif ending == "max_tool_calls":
        tape.model_turn(*(call(n + i) for i in range(last_calls)), end_with="max_tool_calls")
    else:
        tape.run(
            RunFailed(
                run_id=RUN,
                reason="max_turns",
                message=f"the run used its {tape.turn} turns",
                **tape.totals(),
            )
        )
    return tape


# --- next_step, state by state ----------------------------------------------------------------

C1, C2 = call(1), call(2)


def test_accepted_starts() -> None:
    assert next_step(start(ACCEPTED, "alice")) == Start()


def test_in_progress_without_turns_calls_the_model() -> None:
    assert next_step(Steps().state()) == CallModel(1)


def test_output_of_a_turn_in_progress_does_not_change_the_step() -> None:
    tape = Steps().run(RunOutput(run_id=RUN, turn=1, text="partial"))
    assert next_step(tape.state()) == CallModel(1)


def test_a_turn_with_calls_starts_the_first_call() -> None:
    tape = Steps().model_turn(C1, C2)
    assert next_step(tape.state()) == StartTool(C1)


def test_a_proposed_call_is_awaited() -> None:
    tape = Steps().model_turn(C1, C2).propose(C1)
    assert next_step(tape.state()) == AwaitTool(C1, inv(C1))
    tape.decide(C1, "allow")
    assert next_step(tape.state()) == AwaitTool(C1, inv(C1))


def test_an_approval_request_while_in_progress_marks_the_run_awaiting() -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1)
    assert next_step(tape.state()) == MarkAwaiting(aid(C1))


def test_awaiting_waits_for_the_approval() -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1).mark(C1)
    assert tape.state().status is RunStatus.AWAITING_APPROVAL
    assert next_step(tape.state()) == WaitApproval(C1, inv(C1), aid(C1))


@pytest.mark.parametrize("offline", [False, True], ids=["live", "offline"])
@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_awaiting_and_resolved_resumes(decision: str, offline: bool) -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1).mark(C1)
    tape.resolve(C1, decision, offline=offline)
    assert next_step(tape.state()) == Resume(C1, inv(C1), aid(C1))


def test_a_decision_committed_before_the_mark_resumes_once_marked() -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1)
    tape.resolve(C1).mark(C1)
    assert next_step(tape.state()) == Resume(C1, inv(C1), aid(C1))


def test_after_resuming_the_call_is_awaited() -> None:
    tape = Steps().model_turn(C1).outcome(C1, "ask_allow")
    tape.records.pop()  # not completed yet
    assert next_step(tape.state()) == AwaitTool(C1, inv(C1))


def test_the_second_call_starts_after_the_first_result() -> None:
    tape = Steps().model_turn(C1, C2).outcome(C1, "allow")
    assert next_step(tape.state()) == StartTool(C2)


def test_the_second_call_starts_after_a_denied_first_call() -> None:
    tape = Steps().model_turn(C1, C2).outcome(C1, "ask_deny")
    assert next_step(tape.state()) == StartTool(C2)


def test_after_all_results_the_model_is_called_again() -> None:
    tape = Steps().model_turn(C1, C2).outcome(C1, "allow").outcome(C2, "deny")
    assert next_step(tape.state()) == CallModel(2)


def test_turns_used_up_finish_the_run() -> None:
    tape = Steps(max_turns=1, max_tool_calls=1).model_turn(C1).outcome(C1, "allow")
    step = next_step(tape.state())
    assert step == Finish(
        RunFailed(
            run_id=RUN,
            reason="max_turns",
            message="the run used its 1 turns",
            turns=1,
            tool_calls=1,
            prompt_tokens=10,
            completion_tokens=2,
        )
    )


def test_turns_are_only_used_up_by_completed_turns() -> None:
    tape = Steps(max_turns=2).model_turn(C1).outcome(C1, "allow")
    assert next_step(tape.state()) == CallModel(2)


@pytest.mark.parametrize(
    "ending",
    [
        RunCompleted(run_id=RUN, answer="x"),
        RunFailed(run_id=RUN, reason="wall_clock"),
        RunCancelled(run_id=RUN, requested_by="bob"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_terminal_runs_have_ended(ending: Event) -> None:
    assert next_step(Steps().run(ending).state()) == Ended()


@pytest.mark.parametrize("where", ["running", "awaiting", "decided"])
def test_a_recorded_cancel_stops_the_run_whatever_it_was_doing(where: str) -> None:
    """``run.cancel_requested`` wins over every other step, and is never resumed: the cancel
    the node acknowledged survives a restart."""
    tape = Steps().model_turn(C1).propose(C1)
    if where != "running":
        tape.decide(C1, "approval_required").request(C1).mark(C1)
    if where == "decided":
        tape.resolve(C1, "allow", offline=True)
    tape.run(RunCancelRequested(run_id=RUN, requested_by="bob"))
    assert tape.state().cancel_requested_by == "bob"
    assert next_step(tape.state()) == Stopping("bob")
    assert not resumable(next_step(tape.state()))


def test_a_run_cancelled_while_queued_has_ended() -> None:
    tape = Steps(start_run=False).run(RunCancelled(run_id=RUN, requested_by="bob"))
    assert next_step(tape.state()) == Ended()


# --- resumable --------------------------------------------------------------------------------

STEPS: list[tuple[Step, bool]] = [
    (Start(), False),
    (Assemble(), False),
    (CallModel(1), False),
    (StartTool(C1), False),
    (AwaitTool(C1, "i"), False),
    (ParallelCalls(((C1, "i"),), None), True),  # read-only calls cut off run again
    (MarkAwaiting("a"), True),
    (WaitApproval(C1, "i", "a"), True),
    (Resume(C1, "i", "a"), True),
    (Finish(RunFailed(run_id=RUN, reason="max_turns")), False),
    (Stopping("bob"), False),
    (Ended(), False),
]


@pytest.mark.parametrize(("step", "expected"), STEPS, ids=[type(s).__name__ for s, _ in STEPS])
def test_resumable_exactly_for_a_human_wait_and_a_batch_of_reads(
    step: Step, expected: bool
) -> None:
    assert resumable(step) is expected


def test_every_step_kind_is_listed() -> None:
    assert {type(s) for s, _ in STEPS} == set(Step.__args__)


# --- the property: every prefix of valid tapes ------------------------------------------------


def _pending_or_unacted(prefix: list[Recorded]) -> bool:
    """An approval was requested, and neither the run resumed on it nor its call completed."""
    requested = {
        r.event.approval_id: r.event.invocation_id
        for r in prefix
        if isinstance(r.event, ApprovalRequested)
    }
    acted = {r.event.approval_id for r in prefix if isinstance(r.event, RunResumed)}
    completed = {r.event.invocation_id for r in prefix if isinstance(r.event, ToolCompleted)}
    return any(a not in acted and i not in completed for a, i in requested.items())


def _agrees_with_the_tape(step: Step, rest: list[Recorded]) -> None:
    """What the live run appended next (or waited for) is what the decider says."""
    if isinstance(step, Ended):
        assert rest == []
        return
    assert rest, f"{step} but the tape has ended"
    following = rest[0].event
    on_run = [r.event for r in rest if r.stream == RUN_STREAM]
    if isinstance(step, Start):
        assert isinstance(following, RunStarted)
    elif isinstance(step, Assemble):
        assert isinstance(following, RunContextAssembled)
    elif isinstance(step, CallModel):
        assert isinstance(following, RunOutput | RunTurnCompleted) and following.turn == step.turn
    elif isinstance(step, StartTool):
        assert isinstance(following, ToolProposed) and following.call_id == step.call.id
    elif isinstance(step, AwaitTool):
        assert rest[0].stream == f"tool/{step.invocation_id}"
    elif isinstance(step, MarkAwaiting):
        assert on_run[0] == RunAwaitingApproval(run_id=RUN, approval_id=step.approval_id)
    elif isinstance(step, WaitApproval):
        assert isinstance(following, ApprovalResolved)
        assert (following.approval_id, following.invocation_id) == (
            step.approval_id,
            step.invocation_id,
        )
    elif isinstance(step, Resume):
        assert following == RunResumed(run_id=RUN, approval_id=step.approval_id)
    else:
        assert isinstance(step, Finish)
        assert following == step.end


def _prefixes(tape: Steps) -> Iterator[tuple[int, RunState]]:
    state = start(ACCEPTED, "alice")
    yield 0, state
    for i, rec in enumerate(tape.records, 1):
        state = apply(state, rec)
        yield i, state


def check_every_prefix(tape: Steps) -> None:
    boundaries = set(tape.boundaries)
    for i, state in _prefixes(tape):
        prefix = tape.records[:i]
        step = next_step(state)  # never raises
        pending = _pending_or_unacted(prefix)
        if resumable(step):
            assert pending, f"resumable {step} after {[type(r.event).__name__ for r in prefix]}"
        assert resumable(step) is pending, f"{step} after {len(prefix)} events"
        if i in boundaries:
            _agrees_with_the_tape(step, tape.records[i:])
    assert tape.state().status.terminal


tool_turns = st.lists(st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=3), max_size=3)


@settings(max_examples=60, deadline=None)
@given(
    tool_turns,
    st.sampled_from(("answer", "max_turns", "max_tool_calls")),
    st.integers(min_value=1, max_value=3),
)
def test_next_step_on_every_prefix_of_valid_tapes(
    turns: list[list[str]], ending: str, last_calls: int
) -> None:
    check_every_prefix(build(turns, ending, last_calls))


@pytest.mark.parametrize("how", OUTCOMES)
def test_next_step_on_every_prefix_of_each_outcome(how: str) -> None:
    check_every_prefix(build([[how, "allow"], [how]], "answer"))


def test_the_builder_makes_tapes_that_end_as_planned() -> None:
    assert isinstance(build([], "answer").state().end, RunCompleted)
    failed = build([["allow"]], "max_turns").state().end
    assert isinstance(failed, RunFailed) and failed.reason == "max_turns"
    failed = build([["allow"]], "max_tool_calls", 2).state().end
    assert isinstance(failed, RunFailed) and failed.reason == "max_tool_calls"


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "live"])
def test_a_decision_made_before_the_mark_survives_a_restart(offline: bool) -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1)
    assert resumable(next_step(tape.state()))  # MarkAwaiting: the crash window
    tape.resolve(C1, "allow", offline=offline)  # `reel approvals approve` on the stopped node
    assert resumable(next_step(tape.state()))


# --- commands ---------------------------------------------------------------------------------


def test_started_carries_the_budgets() -> None:
    state = start(ACCEPTED, "alice")
    assert started(
        state, max_turns=3, max_tool_calls=4, wall_clock_s=5.5, provider="deterministic"
    ) == RunStarted(
        run_id=RUN, max_turns=3, max_tool_calls=4, wall_clock_s=5.5, provider="deterministic"
    )


def test_awaiting_and_resumed_name_the_approval() -> None:
    state = Steps().state()
    assert awaiting(state, MarkAwaiting("a9")) == RunAwaitingApproval(run_id=RUN, approval_id="a9")
    assert resumed(state, Resume(C1, "i", "a9")) == RunResumed(run_id=RUN, approval_id="a9")


def _after_one_tool_turn(max_tool_calls: int = 5) -> RunState:
    tape = Steps(max_tool_calls=max_tool_calls).model_turn(C1).outcome(C1, "allow")
    tape.run(RunOutput(run_id=RUN, turn=2, text="The answer "))
    tape.run(RunOutput(run_id=RUN, turn=2, text="is 42."))
    return tape.state()


def test_finish_turn_records_the_cached_tokens_model_and_endpoint_of_the_answer() -> None:
    usage = Usage(
        prompt_tokens=7, completion_tokens=3, cached_tokens=5, model="m-2", endpoint="backup"
    )
    turn = finish_turn(_after_one_tool_turn(), 2, usage, (), "stop")[0]
    assert isinstance(turn, RunTurnCompleted)
    assert (turn.cached_tokens, turn.model, turn.endpoint) == (5, "m-2", "backup")


def test_finish_turn_without_calls_completes_the_run() -> None:
    state = _after_one_tool_turn()
    events = finish_turn(state, 2, Usage(prompt_tokens=7, completion_tokens=3), (), "stop")
    assert events == (
        RunTurnCompleted(
            run_id=RUN,
            turn=2,
            prompt_tokens=7,
            completion_tokens=3,
            tool_calls=0,
            finish_reason="stop",
            calls=(),
        ),
        RunCompleted(
            run_id=RUN,
            answer="The answer is 42.",
            reason="final_answer",
            turns=2,
            tool_calls=1,
            prompt_tokens=17,
            completion_tokens=5,
        ),
    )
    # and the fold agrees with the totals it announced
    for event in events:
        state = apply(state, Recorded(event, RUN_STREAM, 0))
    assert state.status is RunStatus.DONE
    assert (len(state.turns), state.prompt_tokens, state.completion_tokens) == (2, 17, 5)


def test_finish_turn_with_too_many_calls_fails_the_run() -> None:
    state = _after_one_tool_turn(max_tool_calls=2)
    calls = (call(2), call(3))
    events = finish_turn(state, 2, Usage(prompt_tokens=1, completion_tokens=1), calls, "tool_calls")
    assert len(events) == 2
    turn, failed = events
    assert isinstance(turn, RunTurnCompleted) and turn.tool_calls == 2
    assert failed == RunFailed(
        run_id=RUN,
        reason="max_tool_calls",
        message="the run may make 2 tool calls",
        turns=2,
        tool_calls=1,
        prompt_tokens=11,
        completion_tokens=3,
    )


def test_finish_turn_with_calls_within_budget_only_completes_the_turn() -> None:
    state = _after_one_tool_turn(max_tool_calls=3)
    calls = (call(2), ToolCall(id="c3", name="fs.read", arguments='"not an object"'))
    events = finish_turn(state, 2, Usage(prompt_tokens=1, completion_tokens=1), calls, "tool_calls")
    assert events == (
        RunTurnCompleted(
            run_id=RUN,
            turn=2,
            prompt_tokens=1,
            completion_tokens=1,
            tool_calls=2,
            finish_reason="tool_calls",
            calls=(
                {"id": "c2", "name": "shell", "arguments": '{"n": 2}'},
                {"id": "c3", "name": "fs.read", "arguments": '"not an object"'},
            ),
        ),
    )
    state = apply(state, Recorded(events[0], RUN_STREAM, 0))
    assert state.turns[-1].calls == calls
    assert state.turns[-1].text == "The answer is 42."
    assert next_step(state) == StartTool(call(2))


@pytest.mark.parametrize(
    ("arguments", "finish_reason", "why"),
    [
        ('{"path": "a', "tool_calls", "arguments for fs.read (c3) are not valid JSON (Input"),
        ("{'path': 'a'}", "tool_calls", "arguments for fs.read (c3) are not valid JSON"),
        ('{"path": "a"}', "length", "cut off at its token limit (finish_reason length) in tool"),
    ],
)
def test_finish_turn_with_calls_that_cannot_be_made_fails_the_run(
    arguments: str, finish_reason: str, why: str
) -> None:
    state = _after_one_tool_turn()
    calls = (call(2), ToolCall(id="c3", name="fs.read", arguments=arguments))
    usage = Usage(prompt_tokens=1, completion_tokens=40)

    turn, failed = finish_turn(state, 2, usage, calls, finish_reason)

    assert turn == RunTurnCompleted(
        run_id=RUN,
        turn=2,
        prompt_tokens=1,
        completion_tokens=40,
        tool_calls=0,
        finish_reason=finish_reason,
        calls=(),
    )
    assert isinstance(failed, RunFailed) and failed.reason == "provider_error"
    assert why in failed.message and "made" in failed.message
    assert (failed.turns, failed.tool_calls, failed.completion_tokens) == (2, 1, 42)
    for event in (turn, failed):
        state = apply(state, Recorded(event, RUN_STREAM, 0))
    assert state.status is RunStatus.FAILED and state.turns[-1].calls == ()
    assert next_step(state) == Ended()


@pytest.mark.parametrize("arguments", ["", "  ", "{}", "[1]", '{"path": 5}'])
def test_empty_or_any_json_arguments_are_for_the_tool_to_judge(arguments: str) -> None:
    calls = (ToolCall(id="c3", name="fs.read", arguments=arguments),)
    (turn,) = finish_turn(_after_one_tool_turn(), 2, Usage(1, 1), calls, "tool_calls")
    assert isinstance(turn, RunTurnCompleted) and turn.tool_calls == 1


def test_a_text_answer_cut_off_at_length_still_completes_the_run() -> None:
    _, completed = finish_turn(_after_one_tool_turn(), 2, Usage(1, 1), (), "length")
    assert isinstance(completed, RunCompleted) and completed.answer == "The answer is 42."


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("completed", RunCompleted(run_id=RUN, answer="D", reason="R")),
        ("failed", RunFailed(run_id=RUN, reason="R", message="D")),
        ("cancelled", RunCancelled(run_id=RUN, reason="R", requested_by="D")),
    ],
)
def test_end_puts_detail_where_each_kind_keeps_it(kind: Any, expected: Event) -> None:
    state = start(ACCEPTED, "alice")
    assert end(state, kind, "R", "D") == expected


def test_end_counts_the_run_so_far() -> None:
    state = Steps().model_turn(C1, C2).outcome(C1, "allow").propose(C2).state()
    ending = end(state, "cancelled", "cancelled", "bob")
    assert isinstance(ending, RunCancelled)
    assert (ending.turns, ending.tool_calls, ending.prompt_tokens, ending.completion_tokens) == (
        1,
        2,
        10,
        2,
    )
    closing = end(state, "failed", "x", "y", closing=Usage(prompt_tokens=5, completion_tokens=6))
    assert (closing.turns, closing.prompt_tokens, closing.completion_tokens) == (2, 15, 8)


# --- interrupt --------------------------------------------------------------------------------


def _interrupted(tape: Steps) -> list[tuple[str, int, tuple[Event, ...]]]:
    return interrupt(tape.state(), fold_invocations(tape.records))


def _next_seq(tape: Steps, stream: str) -> int:
    return sum(1 for r in tape.records if r.stream == stream)


def test_interrupt_denies_a_pending_approval_before_completing_the_call() -> None:
    c3 = call(3)
    tape = Steps().model_turn(C1, C2, c3).outcome(C1, "allow").outcome(C2, "ask_allow")
    tape.propose(c3).decide(c3, "approval_required").request(c3).mark(c3)
    appends = _interrupted(tape)
    assert [(stream, seq) for stream, seq, _ in appends] == [
        (f"tool/{inv(c3)}", 3),
        (RUN_STREAM, _next_seq(tape, RUN_STREAM)),
    ]
    denied, completed = appends[0][2]
    assert denied == ApprovalResolved(
        approval_id=aid(c3),
        invocation_id=inv(c3),
        run_id=RUN,
        decision="deny",
        decided_by="node",
        reason="interrupted",
        tool="shell",
    )
    assert completed == ToolCompleted(
        invocation_id=inv(c3),
        run_id=RUN,
        tool="shell",
        ok=False,
        error=INTERRUPTED,
        error_kind="interrupted",
    )
    assert appends[-1][2] == (
        RunFailed(
            run_id=RUN,
            reason="interrupted",
            message=INTERRUPTED,
            turns=1,
            tool_calls=3,
            prompt_tokens=10,
            completion_tokens=2,
        ),
    )


def test_interrupt_completes_a_running_call_and_leaves_finished_ones() -> None:
    tape = Steps().model_turn(C1, C2).outcome(C1, "ask_allow").propose(C2).decide(C2, "allow")
    appends = _interrupted(tape)
    assert [(s, seq, [type(e).__name__ for e in events]) for s, seq, events in appends] == [
        (f"tool/{inv(C2)}", 2, ["ToolCompleted"]),
        (RUN_STREAM, _next_seq(tape, RUN_STREAM), ["RunFailed"]),
    ]


def test_interrupt_does_not_deny_an_approval_decided_offline_again() -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1)
    tape.mark(C1).resolve(C1, "allow", offline=True)
    appends = _interrupted(tape)
    # the invocation's own stream holds proposed, decided, requested: seq 3, whatever
    # the approval stream holds
    assert appends[0][0:2] == (f"tool/{inv(C1)}", 3)
    assert [type(e) for e in appends[0][2]] == [ToolCompleted]


def test_interrupt_of_a_run_that_never_called_a_tool() -> None:
    tape = Steps().run(RunOutput(run_id=RUN, turn=1, text="hal"))
    appends = _interrupted(tape)
    assert appends == [  # started, context assembled, output: seq 3
        (RUN_STREAM, 3, (RunFailed(run_id=RUN, reason="interrupted", message=INTERRUPTED),))
    ]


def test_interrupt_of_a_queued_run_states_seq_zero() -> None:
    appends = interrupt(start(ACCEPTED, "alice"), {})
    assert [(s, seq) for s, seq, _ in appends] == [(RUN_STREAM, 0)]


def test_interrupt_folds_to_a_failed_run_whose_last_event_is_terminal() -> None:
    tape = (
        Steps().model_turn(C1, C2).outcome(C1, "allow").propose(C2).decide(C2, "approval_required")
    )
    tape.request(C2)
    for stream, seq, events in _interrupted(tape):
        assert seq == _next_seq(tape, stream)
        for event in events:
            tape.add(event, stream)
    assert isinstance(tape.records[-1].event, TERMINAL_EVENTS)
    state = tape.state()
    assert state.status is RunStatus.FAILED
    assert state.approval_id is None and state.resolved is None
    assert next_step(state) == Ended()
    assert interrupt(state, fold_invocations(tape.records))[:-1] == []  # nothing left open


# --- a call closed without a decision on its approval -----------------------------------------
#
# The tool actor can complete an invocation whose approval is still pending without resolving
# it: a restarted invocation whose tool is gone from the catalog (``_begin`` -> ``_load_spec`` ->
# ``unknown_tool``) or whose arguments no longer validate, and ``on_failure`` (e.g. the append of
# a decision failed) closing it ``internal_error``. The run's fold keeps the stale
# ``approval_id`` (and its ``awaiting_approval`` status): see the tests below.


def _closed_undecided(tape: Steps, c: ToolCall, how: str) -> Steps:
    """``c``'s invocation completed by the tool decider with its approval still pending."""
    invocation = fold_invocations(tape.records)[inv(c)]
    assert invocation.pending_approval is not None
    if how == "unknown_tool":
        closing: tuple[Event, ...] = unknown_tool(invocation, ["echo"])
    else:
        closing = (refused(invocation, "the tool invocation failed internally", how),)
    for event in closing:
        tape.tool(c, event)
    return tape


def _drive(tape: Steps) -> RunState:
    """Perform the run's steps the way its actor does, the model answering at once."""
    for _ in range(10):
        state = tape.state()
        step = next_step(state)
        if isinstance(step, MarkAwaiting):
            tape.run(awaiting(state, step))
        elif isinstance(step, Resume):
            tape.run(resumed(state, step))
        elif isinstance(step, CallModel):
            usage = Usage(prompt_tokens=1, completion_tokens=1)
            for event in finish_turn(state, step.turn, usage, (), "stop"):
                tape.run(event)
        elif isinstance(step, Finish):
            tape.run(step.end)
        elif isinstance(step, Ended):
            return state
        else:
            raise AssertionError(f"the run is stuck at {step}")
    raise AssertionError("the run never ended")


@pytest.mark.parametrize("how", ["unknown_tool", "internal_error"])
def test_a_call_closed_while_the_run_awaits_its_approval_lets_the_run_finish(how: str) -> None:
    tape = Steps().model_turn(C1).propose(C1).decide(C1, "approval_required").request(C1).mark(C1)
    assert next_step(tape.state()) == WaitApproval(C1, inv(C1), aid(C1))
    _closed_undecided(tape, C1, how)
    state = _drive(tape)
    assert state.status is RunStatus.DONE


def test_a_call_closed_before_the_mark_leaves_no_approval_behind() -> None:
    tape = Steps().model_turn(C1, C2).propose(C1).decide(C1, "approval_required").request(C1)
    _closed_undecided(tape, C1, "internal_error")
    assert next_step(tape.state()) == StartTool(C2)
    tape.propose(C2).decide(C2, "allow")
    step = next_step(tape.state())
    assert step == AwaitTool(C2, inv(C2))
    assert not resumable(step)
