"""ToolInvocationActor: one tool call, from proposal to result, on its own stream and thread.

Pipeline: ``tool.proposed`` -> validate arguments -> posture + Cedar + grants -> ``tool.decided``
-> (sensitive and not granted) ``tool.approval_requested``, wait for a decision or the time-out,
``tool.approval_resolved`` -> execute in the tool's runtime with a deadline and the run's cancel
event -> ``tool.completed``; then the run is told (:class:`ToolFinished`). Blocking work (a
subprocess, a WASM module) runs on this actor's own thread, so the run stays responsive.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import pykka

from actors.errors import ApprovalAlreadyResolved
from actors.messages import (
    ApprovalPending,
    ApprovalSettled,
    ApprovalTimedOut,
    CancelTool,
    ExecuteTool,
    ResolveApproval,
    Scope,
    ToolFinished,
    reject,
    resolve,
)
from actors.provider import ToolCall
from actors.resume import ResumedInvocation
from actors.services import Services
from actors.stream import OwnedStream
from actors.tool_content import model_content
from events import new_id
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from tools import ExecutionContext, InvalidArguments, ToolSpec, UnknownTool

MAX_ARGUMENT_TEXT = 64 * 1024


class ToolInvocationActor(pykka.ThreadingActor):
    """Owns the stream ``tool/<invocation_id>``."""

    use_daemon_thread = True

    def __init__(
        self,
        services: Services,
        *,
        invocation_id: str,
        run_id: str,
        session_id: str,
        principal: str,
        channel: str | None,
        call: ToolCall,
        run_ref: pykka.ActorRef[Any],
        cancel: threading.Event,
        session_grants: tuple[str, ...],
        posture_overrides: dict[str, str] | None = None,
        resume: ResumedInvocation | None = None,
    ) -> None:
        super().__init__()
        self.s = services
        self.invocation_id = invocation_id
        self.run_id = run_id
        self.session_id = session_id
        self.principal = principal
        self.channel = channel
        self.call = call
        self.run_ref = run_ref
        self.cancel = cancel
        self.session_grants = session_grants
        self.posture_overrides = posture_overrides or {}
        self.out = OwnedStream(
            services.journal,
            f"tool/{invocation_id}",
            principal=principal,
            correlation_id=run_id,
            causation_id=run_id,
        )
        self.spec: ToolSpec | None = None
        self.args: Any = None
        self.approval_id: str | None = None
        self.approval_started = 0.0
        self.approval_timer: Any = None
        self.finished = False
        self.resume = resume
        self.decided_approval: str | None = None
        """The approval whose decision let this call run (reported with a session grant)."""

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        # The work runs as a message, not in on_start: pykka contains (on_failure) only what
        # fails in on_receive.
        self.actor_ref.tell(ExecuteTool())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ExecuteTool):
            if self.resume is not None:
                self._resume(self.resume)
            else:
                self._propose()
        elif isinstance(message, ResolveApproval):
            self._resolve(message)
        elif isinstance(message, ApprovalTimedOut):
            if message.approval_id == self.approval_id and not self.finished:
                self._settle("deny", "once", decided_by="node", reason="timeout")
        elif isinstance(message, CancelTool) and self.approval_id is not None and not self.finished:
            self._settle("deny", "once", decided_by="node", reason=message.reason)
        return None

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Contain a crash: close the invocation on the journal and tell the run."""
        if self.finished:
            return
        self.finished = True
        self._close_approval()
        error = f"the tool invocation failed internally ({getattr(exc_type, '__name__', 'error')})"
        with contextlib.suppress(Exception):
            self._append(
                ToolCompleted(
                    invocation_id=self.invocation_id,
                    run_id=self.run_id,
                    tool=self.call.name,
                    ok=False,
                    error=error,
                    error_kind="internal_error",
                )
            )
        self._tell_run(ok=False, content=f"error: {error}")

    # --- pipeline --------------------------------------------------------------------------

    def _append(self, *events: Event) -> None:
        self.out.append(*events)

    def _propose(self) -> None:
        arguments = _parse_arguments(self.call.arguments)
        self._append(
            ToolProposed(
                invocation_id=self.invocation_id,
                run_id=self.run_id,
                session_id=self.session_id,
                call_id=self.call.id,
                tool=self.call.name,
                arguments=arguments,
            )
        )
        try:
            self.spec = self.s.catalog.spec(self.call.name)
        except UnknownTool:
            names = ", ".join(self.s.catalog.names())
            reason = f"unknown tool {self.call.name!r}"
            self._decided("deny", reason, (), "")
            self._complete_failed(f"{reason}; available tools: {names}", "unknown_tool")
            return
        try:
            self.args = self.s.catalog.validate(self.call.name, self.call.arguments or "{}")
        except InvalidArguments as exc:
            self._complete_failed(f"invalid arguments for {self.call.name}: {exc}", "invalid")
            return
        decision = self.s.gate.decide(
            self.spec,
            principal=self.principal,
            session_id=self.session_id,
            run_id=self.run_id,
            channel=self.channel,
            session_grants=self.session_grants,
            posture_overrides=self.posture_overrides,
        )
        self._decided(
            decision.outcome, decision.reason, decision.policy_ids, decision.posture, decision.grant
        )
        if decision.outcome == "allow":
            self._execute()
        elif decision.outcome == "approval_required":
            self._request_approval(decision.reason, arguments)
        else:
            self._complete_failed(f"denied: {decision.reason}", "denied", denied=True)

    def _resume(self, inv: ResumedInvocation) -> None:
        """Pick up an approval that was pending when the node stopped (see actors.resume)."""
        self.out.next_seq = inv.next_seq
        try:
            self.spec = self.s.catalog.spec(self.call.name)
            self.args = self.s.catalog.validate(self.call.name, self.call.arguments or "{}")
        except (UnknownTool, InvalidArguments) as exc:
            self._complete_failed(f"cannot resume {self.call.name}: {exc}", "invalid")
            return
        approval_id = inv.approval.approval_id
        self.approval_id = approval_id
        waited_s = max(0.0, time.time() - inv.requested_at_ms / 1000)
        self.approval_started = time.monotonic() - waited_s
        if inv.resolution is not None:
            r = inv.resolution
            self.approval_id = None
            self.decided_approval = approval_id
            self.run_ref.tell(
                ApprovalSettled(invocation_id=self.invocation_id, approval_id=approval_id)
            )
            self._act_on(r.decision, r.scope, decided_by=r.decided_by, reason=r.reason)
            return
        self.s.registry.approval_pending(approval_id, self.run_id, self.actor_ref)
        remaining = max(0.0, inv.approval.expires_at_ms / 1000 - time.time())
        ref = self.actor_ref
        self.approval_timer = self.s.io.call_later(
            remaining, lambda: _tell_quietly(ref, ApprovalTimedOut(approval_id))
        )

    def _decided(
        self,
        outcome: str,
        reason: str,
        policy_ids: tuple[str, ...],
        posture: str,
        grant: str | None = None,
    ) -> None:
        self._append(
            ToolDecided(
                invocation_id=self.invocation_id,
                run_id=self.run_id,
                tool=self.call.name,
                outcome=outcome,  # type: ignore[arg-type]
                reason=reason,
                policy_ids=policy_ids,
                posture=posture,
                grant=grant,
            )
        )

    def _request_approval(self, reason: str, arguments: Any) -> None:
        assert self.spec is not None
        approval_id = new_id()
        timeout = self.s.config.approval_timeout_s
        # Routable before it is visible: a decision arriving as soon as the request is on the
        # journal waits in this actor's inbox instead of being refused.
        self.approval_id = approval_id
        self.approval_started = time.monotonic()
        self.s.registry.approval_pending(approval_id, self.run_id, self.actor_ref)
        self._append(
            ApprovalRequested(
                approval_id=approval_id,
                invocation_id=self.invocation_id,
                run_id=self.run_id,
                session_id=self.session_id,
                tool=self.spec.name,
                arguments=arguments,
                risk=self.spec.risk,
                reason=reason,
                expires_at_ms=int(time.time() * 1000 + timeout * 1000),
            )
        )
        ref = self.actor_ref
        self.approval_timer = self.s.io.call_later(
            timeout, lambda: _tell_quietly(ref, ApprovalTimedOut(approval_id))
        )
        self.run_ref.tell(
            ApprovalPending(invocation_id=self.invocation_id, approval_id=approval_id)
        )

    def _resolve(self, message: ResolveApproval) -> None:
        if message.approval_id != self.approval_id or self.finished:
            reject(
                message.reply,
                ApprovalAlreadyResolved(f"approval {message.approval_id} is already resolved"),
            )
            return
        self._settle(
            message.decision, message.scope, decided_by=message.principal, reason=message.reason
        )
        resolve(message.reply, True)

    def _settle(self, decision: str, scope: Scope, *, decided_by: str, reason: str) -> None:
        assert self.approval_id is not None and self.spec is not None
        approval_id = self.approval_id
        self._append(
            ApprovalResolved(
                approval_id=approval_id,
                invocation_id=self.invocation_id,
                run_id=self.run_id,
                decision=decision,  # type: ignore[arg-type]
                scope=scope if decision == "allow" else "once",
                decided_by=decided_by,
                reason=reason,
                tool=self.spec.name,
                grant_principal=self.principal,
                waited_ms=int((time.monotonic() - self.approval_started) * 1000),
            )
        )
        self._close_approval()
        self.decided_approval = approval_id
        self.run_ref.tell(
            ApprovalSettled(invocation_id=self.invocation_id, approval_id=approval_id)
        )
        self._act_on(decision, scope, decided_by=decided_by, reason=reason)

    def _act_on(self, decision: str, scope: Scope, *, decided_by: str, reason: str) -> None:
        """Execute after an allow, or feed the denial back."""
        assert self.spec is not None
        if decision == "allow":
            if scope == "always":
                self.s.gate.grant_always(self.principal, self.spec.name)
            self._execute(grant=scope if scope != "once" else None)
        else:
            why = f"denied by {decided_by}" + (f": {reason}" if reason else "")
            if reason == "timeout":
                why = "denied: the approval timed out"
            self._complete_failed(why, "denied", denied=True)

    def _close_approval(self) -> None:
        if self.approval_timer is not None:
            self.approval_timer.cancel()
            self.approval_timer = None
        if self.approval_id is not None:
            self.s.registry.approval_closed(self.approval_id)
            self.approval_id = None

    def _execute(self, grant: Scope | None = None) -> None:
        assert self.spec is not None
        if self.cancel.is_set():
            self._complete_failed("cancelled before it ran", "cancelled")
            return
        ctx = ExecutionContext.start(self.s.workspace, self.spec.timeout_s, self.cancel)
        result = self.s.catalog.execute(self.spec.name, self.args, ctx)
        completed = ToolCompleted(
            invocation_id=self.invocation_id,
            run_id=self.run_id,
            tool=self.call.name,
            ok=result.ok,
            output=result.output,
            error=result.error,
            error_kind=result.error_kind,
            truncated=result.truncated,
            duration_ms=result.duration_ms,
        )
        self._append(completed)
        self._finish(ok=result.ok, content=model_content(completed), grant=grant)

    def _complete_failed(self, error: str, kind: str, *, denied: bool = False) -> None:
        completed = ToolCompleted(
            invocation_id=self.invocation_id,
            run_id=self.run_id,
            tool=self.call.name,
            ok=False,
            error=error,
            error_kind=kind,
        )
        self._append(completed)
        self._finish(ok=False, content=model_content(completed), denied=denied)

    def _finish(
        self, *, ok: bool, content: str, denied: bool = False, grant: Scope | None = None
    ) -> None:
        self.finished = True
        self._tell_run(ok=ok, content=content, denied=denied, grant=grant)
        self.stop()

    def _tell_run(
        self, *, ok: bool, content: str, denied: bool = False, grant: Scope | None = None
    ) -> None:
        limit = self.s.config.tool_result_max_chars
        if len(content) > limit:
            content = content[:limit] + "\n[cut for the model]"
        _tell_quietly(
            self.run_ref,
            ToolFinished(
                invocation_id=self.invocation_id,
                call_id=self.call.id,
                tool=self.call.name,
                ok=ok,
                content=content,
                denied=denied,
                grant=grant,
                approval_id=self.decided_approval,
            ),
        )


def _parse_arguments(text: str) -> Any:
    """The arguments as JSON when they parse, else the raw text (capped)."""
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text[:MAX_ARGUMENT_TEXT]


def _tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> None:
    """Tell, ignoring an actor that has already stopped (a late timer, a finished run)."""
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
