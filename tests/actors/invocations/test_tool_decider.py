"""The tool invocation's decider (``actors.invocations.decide``): which events each step appends.
Pure functions of the folded state and plain inputs; no actors, no journal, no clock."""

from __future__ import annotations

from typing import Any

import pytest

from actors.approvals.gate import GateDecision
from actors.errors import ApprovalAlreadyResolved
from actors.invocations.decide import (
    MAX_ARGUMENT_TEXT,
    completed,
    denial,
    interrupt,
    judged,
    parse_arguments,
    propose,
    refused,
    resolve,
    unknown_tool,
)
from actors.invocations.state import InvocationState, apply
from actors.provider import ToolCall
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    GrantScope,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from tools import ToolResult

RUN = "r1"
SESSION = "s1"
INV = "i1"
STREAM = f"tool/{INV}"
CALL = ToolCall(id="c1", name="shell", arguments='{"cmd": "ls -l"}')


def fold(*events: Event, at_ms: int = 0) -> InvocationState:
    state = InvocationState(invocation_id=INV)
    for event in events:
        state = apply(state, Recorded(event, STREAM, at_ms))
    return state


def proposed_state() -> InvocationState:
    return fold(propose(InvocationState(invocation_id=INV), CALL, run_id=RUN, session_id=SESSION))


ASK = GateDecision(
    outcome="approval_required",
    reason="shell asks each time",
    policy_ids=("posture.ask",),
    posture="ask_each_time",
)


def requested_state(at_ms: int = 10_000) -> InvocationState:
    state = proposed_state()
    events = judged(state, ASK, risk="high", approval_id="a1", now_ms=at_ms, timeout_s=600)
    for event in events:
        state = apply(state, Recorded(event, STREAM, at_ms))
    return state


def decide(
    state: InvocationState,
    *,
    approval_id: str = "a1",
    decision: str = "allow",
    scope: GrantScope = "once",
    reason: str = "",
    now_ms: int = 12_500,
) -> ApprovalResolved:
    return resolve(
        state,
        approval_id=approval_id,
        decision=decision,
        scope=scope,
        decided_by="alice",
        reason=reason,
        grant_principal="user:alice",
        now_ms=now_ms,
    )


# --- propose ----------------------------------------------------------------------------------


def test_propose_records_the_call_with_decoded_arguments() -> None:
    event = propose(InvocationState(invocation_id=INV), CALL, run_id=RUN, session_id=SESSION)
    assert event == ToolProposed(
        invocation_id=INV,
        run_id=RUN,
        session_id=SESSION,
        call_id="c1",
        tool="shell",
        arguments={"cmd": "ls -l"},
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("[1]", [1]),
        ("null", None),
        ("{not json", "{not json"),
        ('{"a": 1', '{"a": 1'),
    ],
)
def test_parse_arguments(text: str, expected: Any) -> None:
    assert parse_arguments(text) == expected


def test_unparsable_arguments_are_capped() -> None:
    text = "x" * (MAX_ARGUMENT_TEXT + 10)
    assert parse_arguments(text) == "x" * MAX_ARGUMENT_TEXT


# --- judged -----------------------------------------------------------------------------------


def test_judged_allow_decides_only() -> None:
    decision = GateDecision(
        outcome="allow",
        reason="low risk",
        policy_ids=("p1", "p2"),
        posture="always_allow",
        grant="a0",
    )
    events = judged(proposed_state(), decision, risk="low", approval_id="a1", now_ms=0, timeout_s=1)
    assert events == (
        ToolDecided(
            invocation_id=INV,
            run_id=RUN,
            tool="shell",
            outcome="allow",
            reason="low risk",
            policy_ids=("p1", "p2"),
            posture="always_allow",
            grant="a0",
        ),
    )


def test_judged_deny_refuses() -> None:
    decision = GateDecision(
        outcome="deny", reason="forbidden", policy_ids=("p9",), posture="disabled"
    )
    events = judged(proposed_state(), decision, risk="low", approval_id="a1", now_ms=0, timeout_s=1)
    assert len(events) == 2
    decided, refusal = events
    assert isinstance(decided, ToolDecided) and decided.outcome == "deny"
    assert decided.policy_ids == ("p9",) and decided.posture == "disabled"
    assert refusal == ToolCompleted(
        invocation_id=INV,
        run_id=RUN,
        tool="shell",
        ok=False,
        error="denied: forbidden",
        error_kind="denied",
    )


def test_judged_approval_required_requests_an_approval() -> None:
    events = judged(
        proposed_state(), ASK, risk="high", approval_id="a1", now_ms=1_000_000, timeout_s=600
    )
    assert len(events) == 2
    decided, request = events
    assert isinstance(decided, ToolDecided) and decided.outcome == "approval_required"
    assert request == ApprovalRequested(
        approval_id="a1",
        invocation_id=INV,
        run_id=RUN,
        session_id=SESSION,
        tool="shell",
        arguments={"cmd": "ls -l"},
        risk="high",
        reason="shell asks each time",
        expires_at_ms=1_600_000,
    )


def test_expiry_follows_a_fractional_timeout() -> None:
    events = judged(proposed_state(), ASK, risk="high", approval_id="a", now_ms=500, timeout_s=2.5)
    request = events[-1]
    assert isinstance(request, ApprovalRequested) and request.expires_at_ms == 3_000


def test_nothing_is_judged_before_the_proposal() -> None:
    with pytest.raises(ValueError, match=INV):
        judged(
            InvocationState(invocation_id=INV),
            ASK,
            risk="x",
            approval_id="a",
            now_ms=0,
            timeout_s=1,
        )


# --- resolve ----------------------------------------------------------------------------------


def test_resolve_allow() -> None:
    state = requested_state(at_ms=10_000)
    assert state.pending_approval is not None
    assert decide(state, scope="session", reason="fine", now_ms=12_500) == ApprovalResolved(
        approval_id="a1",
        invocation_id=INV,
        run_id=RUN,
        decision="allow",
        scope="session",
        decided_by="alice",
        reason="fine",
        tool="shell",
        grant_principal="user:alice",
        waited_ms=2_500,
    )


@pytest.mark.parametrize("scope", ["once", "session", "always"])
def test_a_denial_is_always_scope_once(scope: GrantScope) -> None:
    event = decide(requested_state(), decision="deny", scope=scope)
    assert (event.decision, event.scope) == ("deny", "once")


def test_anything_but_allow_is_a_denial() -> None:
    assert decide(requested_state(), decision="approve", scope="always").decision == "deny"


def test_waited_ms_comes_from_the_request_commit_time_and_is_never_negative() -> None:
    assert decide(requested_state(at_ms=4_000), now_ms=4_000).waited_ms == 0
    assert decide(requested_state(at_ms=4_000), now_ms=3_000).waited_ms == 0
    assert decide(requested_state(at_ms=4_000), now_ms=64_000).waited_ms == 60_000


def test_resolve_refuses_an_unknown_approval() -> None:
    with pytest.raises(ApprovalAlreadyResolved, match="a2"):
        decide(requested_state(), approval_id="a2")


def test_resolve_refuses_when_nothing_was_requested() -> None:
    with pytest.raises(ApprovalAlreadyResolved):
        decide(proposed_state())


def test_resolve_refuses_an_approval_already_resolved() -> None:
    state = requested_state()
    first = decide(state)
    state = apply(state, Recorded(first, STREAM, 0))
    with pytest.raises(ApprovalAlreadyResolved):
        decide(state, decision="deny")


def test_resolve_refuses_a_decision_made_offline() -> None:
    state = requested_state()
    offline = ApprovalResolved(approval_id="a1", invocation_id=INV, run_id=RUN, decision="deny")
    state = apply(state, Recorded(offline, "approval/a1", 0))
    with pytest.raises(ApprovalAlreadyResolved):
        decide(state)


def test_resolve_refuses_after_the_call_completed() -> None:
    state = requested_state()
    state = apply(state, Recorded(refused(state, "gone", "interrupted"), STREAM, 0))
    with pytest.raises(ApprovalAlreadyResolved):
        decide(state)


# --- denial -----------------------------------------------------------------------------------


def _decided(**fields: Any) -> InvocationState:
    event = ApprovalResolved(approval_id="a1", invocation_id=INV, run_id=RUN, **fields)
    return apply(requested_state(), Recorded(event, STREAM, 0))


def test_denial_is_none_before_a_decision() -> None:
    assert denial(requested_state()) is None


def test_denial_is_none_for_an_allow() -> None:
    assert denial(_decided(decision="allow", decided_by="alice")) is None


def test_denial_by_a_human_with_a_reason() -> None:
    refusal = denial(_decided(decision="deny", decided_by="alice", reason="too risky"))
    assert refusal == ToolCompleted(
        invocation_id=INV,
        run_id=RUN,
        tool="shell",
        ok=False,
        error="denied by alice: too risky",
        error_kind="denied",
    )


def test_denial_by_a_human_without_a_reason() -> None:
    refusal = denial(_decided(decision="deny", decided_by="bob"))
    assert refusal is not None and refusal.error == "denied by bob"


def test_denial_by_timeout() -> None:
    refusal = denial(_decided(decision="deny", decided_by="node", reason="timeout"))
    assert refusal is not None
    assert (refusal.error, refusal.error_kind) == ("denied: the approval timed out", "denied")


def test_denial_by_the_node_for_another_reason_names_it() -> None:
    # a run stopping (cancel, wall clock) denies its pending approval as the node: not a timeout
    refusal = denial(_decided(decision="deny", decided_by="node", reason="wall_clock"))
    assert refusal is not None
    assert (refusal.error, refusal.error_kind) == ("denied by node: wall_clock", "denied")


# --- unknown tools, results -------------------------------------------------------------------


def test_unknown_tool_lists_the_available_tools() -> None:
    call = ToolCall(id="c1", name="nope", arguments="")
    state = fold(propose(InvocationState(invocation_id=INV), call, run_id=RUN, session_id=SESSION))
    decided, refusal = unknown_tool(state, ["echo", "fs.read"])
    assert decided == ToolDecided(
        invocation_id=INV,
        run_id=RUN,
        tool="nope",
        outcome="deny",
        reason="unknown tool 'nope'",
        policy_ids=(),
        posture="",
    )
    assert refusal == ToolCompleted(
        invocation_id=INV,
        run_id=RUN,
        tool="nope",
        ok=False,
        error="unknown tool 'nope'; available tools: echo, fs.read",
        error_kind="unknown_tool",
    )


def test_completed_carries_the_runtime_result() -> None:
    result = ToolResult(
        ok=False, output="part", error="boom", error_kind="timeout", truncated=True, duration_ms=42
    )
    assert completed(proposed_state(), result) == ToolCompleted(
        invocation_id=INV,
        run_id=RUN,
        tool="shell",
        ok=False,
        output="part",
        error="boom",
        error_kind="timeout",
        truncated=True,
        duration_ms=42,
    )


# --- interrupt --------------------------------------------------------------------------------


def test_interrupt_a_pending_approval_denies_it_first() -> None:
    state = requested_state()
    assert interrupt(state, "cut off") == (
        ApprovalResolved(
            approval_id="a1",
            invocation_id=INV,
            run_id=RUN,
            decision="deny",
            decided_by="node",
            reason="interrupted",
            tool="shell",
        ),
        ToolCompleted(
            invocation_id=INV,
            run_id=RUN,
            tool="shell",
            ok=False,
            error="cut off",
            error_kind="interrupted",
        ),
    )


def test_interrupt_a_running_call_completes_it() -> None:
    state = requested_state()
    state = apply(state, Recorded(decide(state), STREAM, 0))  # decided, waiting to proceed
    closing = interrupt(state, "cut off")
    assert [type(e) for e in closing] == [ToolCompleted]
    allowed = apply(
        proposed_state(),
        Recorded(
            ToolDecided(invocation_id=INV, run_id=RUN, tool="shell", outcome="allow", reason=""),
            STREAM,
            0,
        ),
    )
    assert [type(e) for e in interrupt(allowed, "cut off")] == [ToolCompleted]


def test_interrupt_leaves_finished_and_unproposed_invocations_alone() -> None:
    state = proposed_state()
    done = apply(state, Recorded(completed(state, ToolResult(ok=True, output="x")), STREAM, 0))
    assert interrupt(done, "cut off") == ()
    assert interrupt(InvocationState(invocation_id=INV), "cut off") == ()
