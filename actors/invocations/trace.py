"""The spans of one tool call (actors.tracing): the call under its run's root span, and in it the
gate's decision, the wait for a human's approval and the execution. Pure: built from the
invocation's folded state and the times and span ids its actor took.

The tool is named only by a name from the catalog (a name the model made up is ``unknown``), its
arguments and output only by their sizes, an approval by its id, its decision and the
principal's id that made it.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.invocations.state import InvocationState
from actors.tracing import (
    APPROVAL,
    DECISION,
    EXECUTE,
    TOOL,
    Attribute,
    Span,
    Tracer,
    run_span_id,
)
from events.catalog import ApprovalResolved, ToolCompleted


@dataclass(frozen=True, slots=True)
class CallTrace:
    """What every span of one call names, fixed when the call's actor starts, and where its
    spans go."""

    tracer: Tracer
    run_id: str
    session_id: str
    principal: str
    invocation_id: str
    span_id: int
    """The call's own span (the parent of its decision, approval and execution)."""

    def ids(self) -> dict[str, Attribute]:
        return {
            "reel.run_id": self.run_id,
            "reel.session_id": self.session_id,
            "reel.principal": self.principal,
            "reel.invocation_id": self.invocation_id,
        }

    def child(
        self,
        name: str,
        span_id: int,
        start_ns: int,
        end_ns: int,
        attributes: dict[str, Attribute],
        error: str | None = None,
    ) -> Span:
        return Span(
            name=name,
            run_id=self.run_id,
            span_id=span_id,
            parent_id=self.span_id,
            start_ns=start_ns,
            end_ns=end_ns,
            attributes=self.ids() | attributes,
            error=error,
        )


def call_span(
    trace: CallTrace,
    state: InvocationState,
    *,
    tool: str,
    arguments_bytes: int,
    start_ns: int,
    end_ns: int,
) -> Span:
    """The call, once ``tool.completed`` is folded into ``state``. ``tool``: the catalog's
    name of the tool, or ``unknown``."""
    done = state.completed
    attributes: dict[str, Attribute] = {
        **trace.ids(),
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "reel.tool.arguments_bytes": arguments_bytes,
    }
    if state.decided is not None:
        attributes["reel.tool.decision"] = state.decided.outcome
    if state.request is not None:
        attributes["reel.approval_id"] = state.request.approval_id
    error = None
    if done is not None:
        attributes |= _result(done)
        error = None if done.ok else done.error_kind or "failed"
    return Span(
        name=f"{TOOL} {tool}",
        run_id=trace.run_id,
        span_id=trace.span_id,
        parent_id=run_span_id(trace.run_id),
        start_ns=start_ns,
        end_ns=end_ns,
        attributes=attributes,
        error=error,
    )


def decision_span(
    trace: CallTrace, state: InvocationState, *, span_id: int, start_ns: int, end_ns: int
) -> Span:
    """Posture, Cedar and the session's grants deciding the call (``tool.decided`` folded)."""
    decided = state.decided
    attributes: dict[str, Attribute] = {}
    if decided is not None:
        attributes = {
            "reel.tool.decision": decided.outcome,
            "reel.tool.posture": decided.posture,
            "reel.tool.policies": len(decided.policy_ids),
            "reel.tool.granted": decided.grant is not None,
            "reel.tool.vault_handles": len(decided.vault),
        }
    return trace.child(DECISION, span_id, start_ns, end_ns, attributes)


def approval_span(
    trace: CallTrace,
    approval_id: str,
    resolved: ApprovalResolved | None,
    *,
    span_id: int,
    start_ns: int,
    end_ns: int,
) -> Span:
    """The wait for a human's decision on ``approval_id``, ended by ``resolved`` (the node's
    own ``timeout`` or ``interrupted`` included), or cut off when the call ended without one."""
    attributes: dict[str, Attribute] = {"reel.approval_id": approval_id}
    error = None
    if resolved is None:
        error = "withdrawn"
    else:
        attributes |= {
            "reel.approval.decision": resolved.decision,
            "reel.approval.scope": resolved.scope,
            "reel.approval.decided_by": resolved.decided_by,
        }
        if resolved.decided_by == "node":  # the node's reasons are codes; a human's are text
            attributes["reel.approval.reason"] = resolved.reason
            error = resolved.reason
    return trace.child(APPROVAL, span_id, start_ns, end_ns, attributes, error)


def execute_span(
    trace: CallTrace, done: ToolCompleted, *, span_id: int, start_ns: int, end_ns: int
) -> Span:
    """The tool's runtime running the call, with its result's size and outcome."""
    error = None if done.ok else done.error_kind or "failed"
    return trace.child(EXECUTE, span_id, start_ns, end_ns, _result(done), error)


def _result(done: ToolCompleted) -> dict[str, Attribute]:
    out: dict[str, Attribute] = {
        "reel.tool.ok": done.ok,
        "reel.tool.output_bytes": len(done.output.encode()),
        "reel.tool.truncated": done.truncated,
    }
    if done.error_kind:
        out["reel.tool.error_kind"] = done.error_kind
    return out
