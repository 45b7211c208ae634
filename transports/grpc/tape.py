"""Tape entries as reel.v1 messages: one :class:`TapeEvent` per entry of a run's tape.

Every tape entry maps to exactly one message with the entry's ``tape_seq``, so a client can
check the sequence for gaps and repeats. Kinds this protocol version does not model travel as
``raw`` (the event as JSON) rather than being dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from projections import TapeEntry
from proto.reel.v1 import (
    ApprovalRequest,
    ApprovalResolution,
    ApprovalScope,
    Decision,
    Output,
    RawEntry,
    RunState,
    RunStatus,
    StreamError,
    TapeEvent,
    ToolDecision,
    ToolOutcome,
    ToolProposal,
    ToolResult,
    TurnCompleted,
    Usage,
)

TERMINAL_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})
"""The kinds that end a run's tape."""

SCOPES: dict[str, ApprovalScope] = {
    "once": ApprovalScope.ONCE,
    "session": ApprovalScope.SESSION,
    "always": ApprovalScope.ALWAYS,
}
DECISIONS: dict[str, Decision] = {"allow": Decision.ALLOW, "deny": Decision.DENY}
OUTCOMES: dict[str, ToolOutcome] = {
    "allow": ToolOutcome.ALLOW,
    "deny": ToolOutcome.DENY,
    "approval_required": ToolOutcome.APPROVAL_REQUIRED,
}
STATES: dict[str, RunState] = {
    "accepted": RunState.ACCEPTED,
    "in_progress": RunState.IN_PROGRESS,
    "awaiting_approval": RunState.AWAITING_APPROVAL,
    "done": RunState.DONE,
    "failed": RunState.FAILED,
    "cancelled": RunState.CANCELLED,
}

_json = msgspec.json.Encoder()
Fields = Mapping[str, Any]


def to_json(value: Any) -> str:
    """Compact JSON text (tool arguments)."""
    return _json.encode(value).decode()


def _text(event: Fields, name: str) -> str:
    value = event.get(name)
    return "" if value is None else str(value)


def _int(event: Fields, name: str) -> int:
    value = event.get(name)
    return int(value) if isinstance(value, int | float) else 0


def _usage(event: Fields) -> Usage:
    return Usage(
        turns=_int(event, "turns"),
        tool_calls=_int(event, "tool_calls"),
        prompt_tokens=_int(event, "prompt_tokens"),
        completion_tokens=_int(event, "completion_tokens"),
    )


def _status(state: RunState) -> Callable[[Fields], dict[str, Any]]:
    def build(event: Fields) -> dict[str, Any]:
        status = RunStatus(
            state=state,
            reason=_text(event, "reason"),
            message=_text(event, "message"),
            session_id=_text(event, "session_id"),
            approval_id=_text(event, "approval_id"),
            answer=_text(event, "answer"),
            usage=_usage(event)
            if state in (RunState.DONE, RunState.FAILED, RunState.CANCELLED)
            else None,
            requested_by=_text(event, "requested_by"),
        )
        return {"status": status}

    return build


def _output(event: Fields) -> dict[str, Any]:
    return {"output": Output(turn=_int(event, "turn"), text=_text(event, "text"))}


def _turn(event: Fields) -> dict[str, Any]:
    return {
        "turn_completed": TurnCompleted(
            turn=_int(event, "turn"),
            prompt_tokens=_int(event, "prompt_tokens"),
            completion_tokens=_int(event, "completion_tokens"),
            tool_calls=_int(event, "tool_calls"),
            finish_reason=_text(event, "finish_reason"),
        )
    }


def _proposal(event: Fields) -> dict[str, Any]:
    return {
        "tool_proposal": ToolProposal(
            invocation_id=_text(event, "invocation_id"),
            call_id=_text(event, "call_id"),
            tool=_text(event, "tool"),
            arguments_json=to_json(event.get("arguments")),
        )
    }


def _decision(event: Fields) -> dict[str, Any]:
    return {
        "tool_decision": ToolDecision(
            invocation_id=_text(event, "invocation_id"),
            tool=_text(event, "tool"),
            outcome=OUTCOMES.get(_text(event, "outcome"), ToolOutcome.UNSPECIFIED),
            reason=_text(event, "reason"),
            policy_ids=[str(p) for p in event.get("policy_ids") or ()],
            posture=_text(event, "posture"),
            grant=_text(event, "grant"),
        )
    }


def _approval_request(event: Fields) -> dict[str, Any]:
    options = event.get("scope_options") or ("once", "session", "always")
    return {
        "approval_request": ApprovalRequest(
            approval_id=_text(event, "approval_id"),
            invocation_id=_text(event, "invocation_id"),
            session_id=_text(event, "session_id"),
            tool=_text(event, "tool"),
            arguments_json=to_json(event.get("arguments")),
            risk=_text(event, "risk"),
            reason=_text(event, "reason"),
            scope_options=[SCOPES[s] for s in options if s in SCOPES],
            expires_at_ms=_int(event, "expires_at_ms"),
        )
    }


def _approval_resolution(event: Fields) -> dict[str, Any]:
    return {
        "approval_resolution": ApprovalResolution(
            approval_id=_text(event, "approval_id"),
            invocation_id=_text(event, "invocation_id"),
            tool=_text(event, "tool"),
            decision=DECISIONS.get(_text(event, "decision"), Decision.UNSPECIFIED),
            scope=SCOPES.get(_text(event, "scope"), ApprovalScope.UNSPECIFIED),
            decided_by=_text(event, "decided_by"),
            reason=_text(event, "reason"),
            waited_ms=_int(event, "waited_ms"),
        )
    }


def _result(event: Fields) -> dict[str, Any]:
    return {
        "tool_result": ToolResult(
            invocation_id=_text(event, "invocation_id"),
            tool=_text(event, "tool"),
            ok=bool(event.get("ok")),
            output=_text(event, "output"),
            error=_text(event, "error"),
            error_kind=_text(event, "error_kind"),
            truncated=bool(event.get("truncated")),
            duration_ms=_int(event, "duration_ms"),
        )
    }


BUILDERS: dict[str, Callable[[Fields], dict[str, Any]]] = {
    "run.accepted": _status(RunState.ACCEPTED),
    "run.started": _status(RunState.IN_PROGRESS),
    "run.awaiting_approval": _status(RunState.AWAITING_APPROVAL),
    "run.resumed": _status(RunState.IN_PROGRESS),
    "run.completed": _status(RunState.DONE),
    "run.failed": _status(RunState.FAILED),
    "run.cancelled": _status(RunState.CANCELLED),
    "run.output": _output,
    "run.turn_completed": _turn,
    "tool.proposed": _proposal,
    "tool.decided": _decision,
    "tool.approval_requested": _approval_request,
    "tool.approval_resolved": _approval_resolution,
    "tool.completed": _result,
}
"""Tape kind -> the oneof member it becomes."""


def tape_event(entry: TapeEntry) -> TapeEvent:
    """The message for one tape entry."""
    build = BUILDERS.get(entry.kind)
    body = build(entry.event) if build else {"raw": RawEntry(event_json=to_json(entry.event))}
    return TapeEvent(
        run_id=entry.run_id,
        tape_seq=entry.tape_seq,
        position=entry.position,
        kind=entry.kind,
        recorded_at_ms=entry.recorded_at_ms,
        redacted=_int(entry.event, "redacted"),
        **body,
    )


def stream_error(run_id: str, code: int, message: str, field: str = "") -> TapeEvent:
    """An out-of-tape error entry (tape_seq -1): a command on the stream was refused."""
    return TapeEvent(
        run_id=run_id,
        tape_seq=-1,
        kind="stream.error",
        error=StreamError(code=code, message=message, field=field),
    )
