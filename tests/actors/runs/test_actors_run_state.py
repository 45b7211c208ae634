"""The run state machine: every (from, to) pair, and the fold over run events."""

from __future__ import annotations

import itertools

import pytest

from actors import IllegalTransition, RunStatus
from actors.runs.status import ALLOWED, TERMINAL, apply, transition
from events.catalog import (
    RunAccepted,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunOutput,
    RunResumed,
    RunStarted,
)

S = RunStatus
EXPECTED = {
    (S.ACCEPTED, S.IN_PROGRESS),
    (S.ACCEPTED, S.FAILED),
    (S.ACCEPTED, S.CANCELLED),
    (S.IN_PROGRESS, S.AWAITING_APPROVAL),
    (S.IN_PROGRESS, S.DONE),
    (S.IN_PROGRESS, S.FAILED),
    (S.IN_PROGRESS, S.CANCELLED),
    (S.AWAITING_APPROVAL, S.IN_PROGRESS),
    (S.AWAITING_APPROVAL, S.FAILED),
    (S.AWAITING_APPROVAL, S.CANCELLED),
}
"""The architecture's machine, written out independently of ALLOWED."""

PAIRS = list(itertools.product(RunStatus, RunStatus))


def test_allowed_is_the_documented_machine() -> None:
    assert {(a, b) for a, targets in ALLOWED.items() for b in targets} == EXPECTED
    assert set(ALLOWED) == set(RunStatus)
    assert {s for s in RunStatus if s.terminal} == set(TERMINAL) == {S.DONE, S.FAILED, S.CANCELLED}


@pytest.mark.parametrize(("current", "target"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_transition(current: RunStatus, target: RunStatus) -> None:
    if (current, target) in EXPECTED:
        assert transition(current, target) is target
    else:
        with pytest.raises(IllegalTransition) as caught:
            transition(current, target)
        assert str(current) in str(caught.value) and str(target) in str(caught.value)


def test_the_fold_follows_a_run_with_an_approval() -> None:
    events = [
        RunAccepted(run_id="r", session_id="s", text="t"),
        RunStarted(run_id="r", max_turns=1, max_tool_calls=1, wall_clock_s=1.0),
        RunOutput(run_id="r", turn=1, text="x"),
        RunAwaitingApproval(run_id="r", approval_id="a"),
        RunResumed(run_id="r", approval_id="a"),
        RunCompleted(run_id="r", answer="x"),
    ]
    status = None
    seen = []
    for event in events:
        status = apply(status, event)
        seen.append(status)
    assert seen == [
        S.ACCEPTED,
        S.IN_PROGRESS,
        S.IN_PROGRESS,
        S.AWAITING_APPROVAL,
        S.IN_PROGRESS,
        S.DONE,
    ]


@pytest.mark.parametrize(
    "events",
    [
        [RunStarted(run_id="r", max_turns=1, max_tool_calls=1, wall_clock_s=1.0)],
        [RunAccepted(run_id="r", session_id="s", text="t")] * 2,
        [
            RunAccepted(run_id="r", session_id="s", text="t"),
            RunCompleted(run_id="r", answer="too early"),
        ],
        [
            RunAccepted(run_id="r", session_id="s", text="t"),
            RunCancelled(run_id="r"),
            RunFailed(run_id="r", reason="interrupted"),
        ],
    ],
    ids=["started-before-accepted", "accepted-twice", "done-before-started", "after-terminal"],
)
def test_the_fold_refuses_impossible_histories(events: list[object]) -> None:
    status = None
    with pytest.raises(IllegalTransition):
        for event in events:
            status = apply(status, event)  # type: ignore[arg-type]
