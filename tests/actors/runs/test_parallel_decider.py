"""The run decider's batches of read-only calls (``actors.runs.decide.ParallelCalls``), state by
state: pure functions on folded tapes, no actors (tests/actors/runs/test_run_decider.py's
builder). The same answers decide what a live run does and which runs recovery resumes."""

from __future__ import annotations

from actors.provider import ToolCall
from actors.runs.decide import (
    SEQUENTIAL,
    AwaitTool,
    Batching,
    CallModel,
    MarkAwaiting,
    ParallelCalls,
    StartTool,
    next_step,
    resumable,
)
from tests.actors.runs.test_run_decider import Steps, call, inv

R1, R2, R3, R4 = call(1), call(2), call(3), call(4)
WRITE = ToolCall(id="w", name="fs.write", arguments="{}")


def reads(limit: int = 4) -> Batching:
    return Batching(lambda c: c.name != "fs.write", limit)


def test_the_first_read_starts_and_the_next_waits_for_its_decision() -> None:
    tape = Steps().model_turn(R1, R2, R3)
    assert next_step(tape.state(), reads()) == ParallelCalls((), R1)
    tape.propose(R1)  # proposed, not decided: nothing after it starts
    assert next_step(tape.state(), reads()) == ParallelCalls(((R1, inv(R1)),), None)
    tape.decide(R1, "allow")
    assert next_step(tape.state(), reads()) == ParallelCalls(((R1, inv(R1)),), R2)


def test_allowed_reads_run_together_up_to_the_limit() -> None:
    tape = Steps().model_turn(R1, R2, R3, R4)
    for c in (R1, R2):
        tape.propose(c).decide(c, "allow")
    running = ((R1, inv(R1)), (R2, inv(R2)))
    assert next_step(tape.state(), reads(2)) == ParallelCalls(running, None)  # the limit
    assert next_step(tape.state(), reads(4)) == ParallelCalls(running, R3)
    tape.complete(R1)  # a slot frees when the first result is recorded
    assert next_step(tape.state(), reads(2)) == ParallelCalls(((R2, inv(R2)),), R3)


def test_a_write_ends_the_batch_and_runs_alone() -> None:
    tape = Steps().model_turn(R1, WRITE, R2)
    tape.propose(R1).decide(R1, "allow")
    # the write is not started while the read before it runs
    assert next_step(tape.state(), reads()) == ParallelCalls(((R1, inv(R1)),), None)
    tape.complete(R1)
    assert next_step(tape.state(), reads()) == StartTool(WRITE)  # alone, as before


def test_a_read_that_asks_a_human_waits_for_the_reads_before_it_then_runs_alone() -> None:
    tape = Steps().model_turn(R1, R2, R3)
    tape.propose(R1).decide(R1, "allow").propose(R2).decide(R2, "approval_required").request(R2)
    # R1 still runs: the run waits for it, does not mark itself waiting, starts nothing after R2
    state = tape.state()
    assert next_step(state, reads()) == ParallelCalls(((R1, inv(R1)), (R2, inv(R2))), None)
    assert state.approval_id is not None
    tape.complete(R1)  # R1's result keeps R2's approval open
    assert tape.state().approval_id is not None
    assert next_step(tape.state(), reads()) == MarkAwaiting(f"a-{R2.id}")


def test_without_batching_every_call_runs_alone() -> None:
    tape = Steps().model_turn(R1, R2)
    assert next_step(tape.state(), SEQUENTIAL) == StartTool(R1)
    tape.propose(R1).decide(R1, "allow")
    assert next_step(tape.state()) == AwaitTool(R1, inv(R1))


def test_a_batch_cut_off_by_a_crash_is_resumable_and_a_lone_call_is_not() -> None:
    tape = Steps().model_turn(R1, R2, R3, R4)
    for c in (R1, R2, R3, R4):
        tape.propose(c).decide(c, "allow")
    tape.complete(R1).complete(R2)
    step = next_step(tape.state(), reads())
    assert step == ParallelCalls(((R3, inv(R3)), (R4, inv(R4))), None)
    assert resumable(step)
    assert not resumable(next_step(tape.state(), SEQUENTIAL))  # interrupted, as before
    tape.complete(R3).complete(R4)
    assert next_step(tape.state(), reads()) == CallModel(2)
