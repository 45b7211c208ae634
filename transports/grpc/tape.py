"""Tape entries as reel.v1 messages: one :class:`TapeEvent` per entry of a run's tape.

Every tape entry maps to exactly one message with the entry's ``tape_seq``, so a client can
check the sequence for gaps and repeats. Kinds this protocol version does not model travel as
``raw`` (the event as JSON) rather than being dropped.
"""

from __future__ import annotations

from typing import Any

import msgspec

from events.catalog import (
    GRANT_MATCHES,
    GRANT_SCOPES,
    ApprovalRequested,
    ApprovalResolved,
    Event,
    GrantScope,
    RunAccepted,
    RunAwaitingApproval,
    RunCompleted,
    RunFailed,
    RunOutput,
    RunResumed,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.catalog import (
    GrantMatch as GrantMatchName,
)
from events.lifecycle import STATUS_OF, TERMINAL_EVENTS
from projections import TapeRecord
from proto.reel.v1 import (
    ApprovalRequest,
    ApprovalResolution,
    ApprovalScope,
    Decision,
    GrantMatch,
    Output,
    RawEntry,
    RunState,
    StreamError,
    TapeEvent,
    ToolDecision,
    ToolOutcome,
    ToolProposal,
    ToolResult,
    TurnCompleted,
    Usage,
)
from proto.reel.v1 import (
    RunStatus as RunStatusMessage,
)

SCOPES: dict[str, ApprovalScope] = {name: ApprovalScope[name.upper()] for name in GRANT_SCOPES}
"""An approval scope on the wire (the one table of it; :data:`SCOPE_NAMES` reads it back)."""
SCOPE_NAMES: dict[ApprovalScope, GrantScope] = {
    ApprovalScope.UNSPECIFIED: "once",
    **{SCOPES[name]: name for name in GRANT_SCOPES},
}
"""A scope the wire names, as reel's (unspecified means once)."""
MATCHES: dict[str, GrantMatch] = {name: GrantMatch[name.upper()] for name in GRANT_MATCHES}
"""A grant's match on the wire (the one table of it; :data:`MATCH_NAMES` reads it back)."""
MATCH_NAMES: dict[GrantMatch, GrantMatchName] = {
    GrantMatch.UNSPECIFIED: "any",
    **{MATCHES[name]: name for name in GRANT_MATCHES},
}
"""A match the wire names, as reel's (unspecified means any)."""
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


def to_json(value: Any) -> str:
    """Compact JSON text (tool arguments)."""
    return _json.encode(value).decode()


def _status(state: RunState, event: Event) -> dict[str, Any]:
    status = RunStatusMessage(
        state=state,
        session_id=event.session_id if isinstance(event, RunAccepted) else "",
        approval_id=event.approval_id
        if isinstance(event, RunAwaitingApproval | RunResumed)
        else "",
    )
    if isinstance(event, TERMINAL_EVENTS):
        status.reason = event.reason
        status.usage = Usage(
            turns=event.turns,
            tool_calls=event.tool_calls,
            prompt_tokens=event.prompt_tokens,
            completion_tokens=event.completion_tokens,
        )
        if isinstance(event, RunFailed):
            status.message = event.message
        elif isinstance(event, RunCompleted):
            status.answer = event.answer
        else:
            status.requested_by = event.requested_by
    return {"status": status}


def _body(event: Event) -> dict[str, Any] | None:
    """The oneof member for ``event`` (None: not modelled, sent as ``raw``)."""
    status = STATUS_OF.get(type(event))
    if status is not None:
        return _status(STATES[status], event)
    if isinstance(event, RunOutput):
        return {"output": Output(turn=event.turn, text=event.text)}
    if isinstance(event, RunTurnCompleted):
        return {
            "turn_completed": TurnCompleted(
                turn=event.turn,
                prompt_tokens=event.prompt_tokens,
                completion_tokens=event.completion_tokens,
                tool_calls=event.tool_calls,
                finish_reason=event.finish_reason,
            )
        }
    if isinstance(event, ToolProposed):
        return {
            "tool_proposal": ToolProposal(
                invocation_id=event.invocation_id,
                call_id=event.call_id,
                tool=event.tool,
                arguments_json=to_json(event.arguments),
            )
        }
    if isinstance(event, ToolDecided):
        return {
            "tool_decision": ToolDecision(
                invocation_id=event.invocation_id,
                tool=event.tool,
                outcome=OUTCOMES.get(event.outcome, ToolOutcome.UNSPECIFIED),
                reason=event.reason,
                policy_ids=list(event.policy_ids),
                posture=event.posture,
                grant=event.grant or "",
            )
        }
    if isinstance(event, ApprovalRequested):
        return {
            "approval_request": ApprovalRequest(
                approval_id=event.approval_id,
                invocation_id=event.invocation_id,
                session_id=event.session_id,
                tool=event.tool,
                arguments_json=to_json(event.arguments),
                risk=event.risk,
                reason=event.reason,
                scope_options=[SCOPES[s] for s in event.scope_options if s in SCOPES],
                expires_at_ms=event.expires_at_ms,
            )
        }
    if isinstance(event, ApprovalResolved):
        return {
            "approval_resolution": ApprovalResolution(
                approval_id=event.approval_id,
                invocation_id=event.invocation_id,
                tool=event.tool,
                decision=DECISIONS.get(event.decision, Decision.UNSPECIFIED),
                scope=SCOPES.get(event.scope, ApprovalScope.UNSPECIFIED),
                decided_by=event.decided_by,
                reason=event.reason,
                waited_ms=event.waited_ms,
                match=MATCHES[event.match],
                prefix=event.prefix,
            )
        }
    if isinstance(event, ToolCompleted):
        return {
            "tool_result": ToolResult(
                invocation_id=event.invocation_id,
                tool=event.tool,
                ok=event.ok,
                output=event.output,
                error=event.error or "",
                error_kind=event.error_kind or "",
                truncated=event.truncated,
                duration_ms=event.duration_ms,
            )
        }
    return None


def tape_event(entry: TapeRecord) -> TapeEvent:
    """The message for one tape entry."""
    body = _body(entry.event)
    if body is None:
        body = {"raw": RawEntry(event_json=to_json(entry.event))}
    return TapeEvent(
        run_id=entry.run_id,
        tape_seq=entry.tape_seq,
        position=entry.position,
        kind=entry.kind,
        recorded_at_ms=entry.recorded_at_ms,
        redacted=entry.event.redacted,
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
