"""Which events each step of a tool invocation appends: pure functions of the folded
:class:`actors.invocations.state.InvocationState` and of plain inputs (the gate's decision, a clock
reading, a tool result). The tool actor performs the effects (Cedar, execution, timers) and
hands their outcomes here; recovery asks :func:`interrupt` what closes a cut-off invocation.
"""

from __future__ import annotations

import json
from typing import Any

from actors.approvals.gate import GateDecision
from actors.errors import ApprovalAlreadyResolved
from actors.invocations.state import InvocationState
from actors.provider import ToolCall
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    GrantMatch,
    GrantScope,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.fields import INVALID_TOOL_NAME, TOOL_NAME
from events.redaction.redact import looks_secret
from tools import ToolResult

MAX_ARGUMENT_TEXT = 64 * 1024


def recorded_name(name: str) -> str:
    """A tool name a model proposed, as it may be recorded: itself when it is a valid tool name,
    else ``invalid_tool_name`` (a model can say anything, a secret included)."""
    return name if TOOL_NAME.problem(name, looks_secret) is None else INVALID_TOOL_NAME


def propose(
    state: InvocationState, call: ToolCall, *, run_id: str, session_id: str
) -> ToolProposed:
    """``tool.proposed``: the call as the model made it (arguments decoded when they parse).
    The name is :func:`recorded_name`: the journal stores tool names in clear, and a call whose
    name is not valid is refused as an unknown tool either way."""
    return ToolProposed(
        invocation_id=state.invocation_id,
        run_id=run_id,
        session_id=session_id,
        call_id=call.id,
        tool=recorded_name(call.name),
        arguments=parse_arguments(call.arguments),
    )


def parse_arguments(text: str) -> Any:
    """The arguments as JSON when they parse, else the raw text (capped)."""
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text[:MAX_ARGUMENT_TEXT]


def refused(state: InvocationState, error: str, kind: str) -> ToolCompleted:
    """``tool.completed`` for a call that did not run (unknown tool, bad arguments, denied)."""
    proposed = _proposed(state)
    return ToolCompleted(
        invocation_id=state.invocation_id,
        run_id=proposed.run_id,
        tool=proposed.tool,
        ok=False,
        error=error,
        error_kind=kind,
    )


def unknown_tool(state: InvocationState, available: list[str]) -> tuple[Event, ...]:
    proposed = _proposed(state)
    reason = f"unknown tool {proposed.tool!r}"
    return (
        _decided(state, "deny", reason, (), ""),
        refused(state, f"{reason}; available tools: {', '.join(available)}", "unknown_tool"),
    )


def judged(
    state: InvocationState,
    decision: GateDecision,
    *,
    risk: str,
    approval_id: str,
    now_ms: int,
    timeout_s: float,
) -> tuple[Event, ...]:
    """``tool.decided`` and what the outcome implies: nothing more for an allow (the actor
    executes), a refusal for a deny, an approval request when a human must decide."""
    decided = _decided(
        state,
        decision.outcome,
        decision.reason,
        decision.policy_ids,
        decision.posture,
        decision.grant,
        decision.vault,
    )
    if decision.outcome == "allow":
        return (decided,)
    if decision.outcome != "approval_required":
        return decided, refused(state, f"denied: {decision.reason}", "denied")
    proposed = _proposed(state)
    request = ApprovalRequested(
        approval_id=approval_id,
        invocation_id=state.invocation_id,
        run_id=proposed.run_id,
        session_id=proposed.session_id,
        tool=proposed.tool,
        arguments=proposed.arguments,
        risk=risk,
        reason=decision.reason,
        expires_at_ms=now_ms + int(timeout_s * 1000),
    )
    return decided, request


def resolve(
    state: InvocationState,
    *,
    approval_id: str,
    decision: str,
    scope: GrantScope,
    decided_by: str,
    reason: str,
    grant_principal: str,
    now_ms: int,
    match: GrantMatch = "any",
    prefix: str = "",
    digest: bytes = b"",
) -> ApprovalResolved:
    """``tool.approval_resolved``; raises :class:`ApprovalAlreadyResolved` unless
    ``approval_id`` is this invocation's pending approval. The binding (``match``, ``prefix``,
    the arguments' ``digest`` for ``exact``) is kept only for an allow with scope session."""
    pending = state.pending_approval
    if pending is None or pending.approval_id != approval_id:
        raise ApprovalAlreadyResolved(f"approval {approval_id} is already resolved")
    bound = decision == "allow" and scope == "session"
    match = match if bound else "any"
    return ApprovalResolved(
        match=match,
        prefix=prefix if match == "prefix" else "",
        arguments_digest=digest if match == "exact" else b"",
        approval_id=approval_id,
        invocation_id=state.invocation_id,
        run_id=pending.run_id,
        decision="allow" if decision == "allow" else "deny",
        scope=scope if decision == "allow" else "once",
        decided_by=decided_by,
        reason=reason,
        tool=pending.tool,
        grant_principal=grant_principal,
        waited_ms=max(now_ms - state.requested_at_ms, 0),
    )


def denial(state: InvocationState) -> ToolCompleted | None:
    """After a decision: the refusal to append when it was a denial, None to execute (and
    None once the call completed: nothing follows a completion)."""
    resolution = state.resolution
    if resolution is None or resolution.decision == "allow" or state.completed is not None:
        return None
    return _refusal(state, resolution)


def withdrawn(
    state: InvocationState, reason: str, *, grant_principal: str, now_ms: int
) -> tuple[Event, ...]:
    """The run is stopping (``reason``) while this call waits for its approval: the node's
    denial and the call's completion, appended together so no restart finds one without the
    other. Raises :class:`ApprovalAlreadyResolved` when nothing is pending."""
    pending = state.pending_approval
    if pending is None:
        raise ApprovalAlreadyResolved(f"invocation {state.invocation_id} has no pending approval")
    resolution = resolve(
        state,
        approval_id=pending.approval_id,
        decision="deny",
        scope="once",
        decided_by="node",
        reason=reason,
        grant_principal=grant_principal,
        now_ms=now_ms,
    )
    return resolution, _refusal(state, resolution)


def _refusal(state: InvocationState, resolution: ApprovalResolved) -> ToolCompleted:
    if resolution.reason == "timeout":
        why = "denied: the approval timed out"
    else:
        why = f"denied by {resolution.decided_by}" + (
            f": {resolution.reason}" if resolution.reason else ""
        )
    return refused(state, why, "denied")


def completed(state: InvocationState, result: ToolResult) -> ToolCompleted:
    """``tool.completed`` with what the runtime returned."""
    proposed = _proposed(state)
    return ToolCompleted(
        invocation_id=state.invocation_id,
        run_id=proposed.run_id,
        tool=proposed.tool,
        ok=result.ok,
        output=result.output,
        error=result.error,
        error_kind=result.error_kind,
        truncated=result.truncated,
        duration_ms=result.duration_ms,
    )


def interrupt(state: InvocationState, why: str) -> tuple[Event, ...]:
    """What closes an invocation that will never finish (its run was cut off or crashed): a
    pending approval denied by the node, then ``tool.completed`` with ``error_kind``
    ``interrupted``. Nothing for an invocation that already completed."""
    if state.completed is not None or state.proposed is None:
        return ()
    closing: list[Event] = []
    pending = state.pending_approval
    if pending is not None:
        closing.append(
            ApprovalResolved(
                approval_id=pending.approval_id,
                invocation_id=state.invocation_id,
                run_id=pending.run_id,
                decision="deny",
                decided_by="node",
                reason="interrupted",
                tool=pending.tool,
            )
        )
    closing.append(refused(state, why, "interrupted"))
    return tuple(closing)


def _proposed(state: InvocationState) -> ToolProposed:
    if state.proposed is None:
        raise ValueError(f"invocation {state.invocation_id} has no tool.proposed")
    return state.proposed


def _decided(
    state: InvocationState,
    outcome: str,
    reason: str,
    policy_ids: tuple[str, ...],
    posture: str,
    grant: str | None = None,
    vault: tuple[str, ...] = (),
) -> ToolDecided:
    proposed = _proposed(state)
    return ToolDecided(
        invocation_id=state.invocation_id,
        run_id=proposed.run_id,
        tool=proposed.tool,
        outcome=outcome,  # type: ignore[arg-type]  # the gate's outcomes are the event's
        reason=reason,
        policy_ids=policy_ids,
        posture=posture,
        grant=grant,
        vault=vault,
    )
