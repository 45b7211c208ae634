"""ToolInvocationActor: one tool call, from proposal to result, on its own stream and thread.

A thin shell around :mod:`actors.invocations.state` (the state) and
:mod:`actors.invocations.decide` (the events): ``tool.proposed`` -> argument validation -> posture
+ Cedar + grants (the gate) -> ``tool.decided``, committed with the proposal -> (sensitive and
not granted)
``tool.approval_requested``, a decision or the time-out ``tool.approval_resolved``, then the run's
:class:`Proceed` -> execution in the tool's runtime with a deadline and the run's cancel event ->
``tool.completed``. Every append is reported to the run (:class:`ToolAppended`), which folds it.
Blocking work (a subprocess, a WASM module) runs on this actor's own thread, so the run stays
responsive.

After a restart the actor starts with its folded state: a pending approval is pending again
(with the time it has left), a decided one waits for the run to proceed, and a read-only call of
a batch that the crash cut off (not decided, or allowed but without a result) is decided again
and, if allowed, runs again.

In a batch of read-only calls (:class:`actors.runs.decide.ParallelCalls`) the actors execute at
once, but each appends ``tool.completed`` only after the one before it (``after``) did, and
sets ``done`` when its own is on the journal (or the actor is gone): the tape records the
results in proposal order whatever order they finish in.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import msgspec
import pykka

from actors import checkpoints
from actors.actor_threads import PooledActor
from actors.approvals.grants import Grant, check_decision
from actors.errors import ApprovalAlreadyResolved, InvalidCommand
from actors.invocations.decide import (
    completed,
    denial,
    judged,
    propose,
    refused,
    unknown_tool,
    withdrawn,
)
from actors.invocations.decide import (
    resolve as resolution,
)
from actors.invocations.state import InvocationState, apply
from actors.invocations.trace import (
    CallTrace,
    approval_span,
    call_span,
    decision_span,
    execute_span,
)
from actors.io_loop import Timer
from actors.messages import (
    ApprovalTimedOut,
    CancelTool,
    ExecuteTool,
    Proceed,
    ResolveApproval,
    ToolAppended,
    reject,
    resolve,
)
from actors.provider import ToolCall
from actors.services import Services
from actors.stream import OwnedStream, Recorded
from actors.tracing import new_span_id, stream_span_id
from events import MAX_PAYLOAD_BYTES, AppendRejected, ConcurrencyConflict, JournalError, new_id
from events.catalog import Event, ToolProposed
from tools import ExecutionContext, InvalidArguments, ToolResult, ToolSpec, UnknownTool
from tools.handles import handles_of
from tools.subjects import arguments_digest

TOOL_OUTPUT_BUDGET = MAX_PAYLOAD_BYTES - 16 * 1024
"""The most bytes a tool's output may take: ``tool.completed`` must fit the journal's payload
limit, with room for its other fields (ids, tool name, error text)."""


class ToolInvocationActor(PooledActor):
    """Owns the stream ``tool/<invocation_id>``."""

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
        session_grants: tuple[Grant, ...],
        posture_overrides: dict[str, str] | None = None,
        state: InvocationState | None = None,
        proceed: bool = False,
        after: threading.Event | None = None,
        done: threading.Event | None = None,
    ) -> None:
        super().__init__()
        self.s = services
        self.state = state or InvocationState(invocation_id=invocation_id)
        self.run_id = run_id
        self.session_id = session_id
        self.principal = principal
        self.channel = channel
        self.call = call
        self.run_ref = run_ref
        self.cancel = cancel
        self.session_grants = session_grants
        self.posture_overrides = posture_overrides or {}
        self.proceed = proceed
        """The run is in progress after this call's decision: act on it once begun."""
        self.after = after
        """Set once the call before this one in its batch recorded its result (None: alone)."""
        self.done = done or threading.Event()
        self.unreported: tuple[Recorded, ...] = ()
        """Appended, not yet told to the run (one message for a step, not one per append)."""
        self.held: ToolProposed | None = None
        """``tool.proposed``, built and not yet appended: it is committed with what is decided
        next (the decision, or the refusal of an unknown tool or bad arguments), one commit
        where there were two. Nothing outside this actor acts on a proposal alone, and a
        crash before that commit leaves what a crash before the proposal's own commit left: a
        turn's call with no invocation, which the run starts again."""
        self.out = OwnedStream(
            services.journal,
            self.state.stream,
            principal=principal,
            correlation_id=run_id,
            causation_id=run_id,
            home=session_id,
        )
        self.spec: ToolSpec | None = None
        self.args: Any = None
        self.timer: Timer | None = None
        self.routed: str | None = None
        """The approval id this actor is registered for (decisions are routed here)."""
        self.finished = False
        self.trace = (
            None
            if services.tracer is None
            else CallTrace(
                tracer=services.tracer,
                run_id=run_id,
                session_id=session_id,
                principal=principal,
                invocation_id=invocation_id,
                span_id=stream_span_id(self.state.stream),
            )
        )
        """The call's ids and where its spans go (None: no telemetry, no span is built)."""
        self.began_ns = time.time_ns()
        self.waiting: tuple[str, int] | None = None
        """The approval id and when its wait began, while a traced approval is pending."""

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        # The work runs as a message, not in on_start: pykka contains (on_failure) only what
        # fails in on_receive.
        self.actor_ref.tell(ExecuteTool())

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, ExecuteTool):
            self._begin()
        elif isinstance(message, ResolveApproval):
            self._resolve(message)
        elif self.finished:
            return None
        elif isinstance(message, ApprovalTimedOut):
            pending = self.state.pending_approval
            if pending is not None and pending.approval_id == message.approval_id:
                self._settle(
                    ResolveApproval(
                        approval_id=message.approval_id,
                        decision="deny",
                        principal="node",
                        reason="timeout",
                    )
                )
        elif isinstance(message, CancelTool):
            self._on_cancel(message.reason)
        elif isinstance(message, Proceed):
            self._act()
        return None

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Contain a crash: close the invocation on the journal, which tells the run."""
        if self.finished:
            return
        self._close_approval()
        error = f"the tool invocation failed internally ({getattr(exc_type, '__name__', 'error')})"
        with contextlib.suppress(Exception):
            if self.state.proposed is None and self.held is None:
                self.held = propose(
                    self.state, self.call, run_id=self.run_id, session_id=self.session_id
                )
            self._complete(refused(self._deciding(), error, "internal_error"))
        self._report()  # what was appended reaches the run even when the rest could not be
        self.finished = True
        self.done.set()

    def on_stop(self) -> None:
        self.done.set()  # the calls after this one never wait for an actor that is gone

    # --- journal ---------------------------------------------------------------------------

    def _append(self, *events: Event, principal: str | None = None) -> None:
        """Append (after the held proposal, in the same commit), fold, and report to the run.
        ``principal``: who caused the events when it is not the run's principal (an approver,
        the node); a held proposal is never appended with one, only ever with what the gate
        decided on the run's behalf."""
        held = () if self.held is None else (self.held,)
        self.held = None
        assert not held or principal is None, "a proposal is the run principal's"
        records = self.out.append(self.state.next_seq, *held, *events, principal=principal)
        for rec in records:
            self.state = apply(self.state, rec)
        self.unreported += tuple(records)
        self._report()

    def _deciding(self) -> InvocationState:
        """The state the next events are decided from: the folded one, naming the held
        proposal as its ``proposed`` (as built; the journal redacts it and what is decided from
        it in the same append). Not a fold and never kept: the actor folds only what the
        journal returns."""
        if self.held is None:
            return self.state
        return msgspec.structs.replace(self.state, proposed=self.held)

    def _report(self) -> None:
        """Tell the run what it has not been told yet."""
        if self.unreported:
            records, self.unreported = self.unreported, ()
            _tell_quietly(self.run_ref, ToolAppended(records))

    def _complete(self, *events: Event, principal: str | None = None) -> None:
        """Append the events that end the invocation (the last is ``tool.completed``), after
        the call before it in its batch recorded its own."""
        self._close_approval()
        if self.after is not None:
            if self.held is not None:  # not kept from the run while this call waits its turn
                self._append()
            self.after.wait()
        self._append(*events, principal=principal)
        self.finished = True
        self.done.set()
        self.stop()
        if self.trace is not None:
            self._trace_approval()
            arguments = self.call.arguments or ""
            span = call_span(
                self.trace,
                self.state,
                tool=self.spec.name if self.spec is not None else "unknown",
                arguments_bytes=len(arguments.encode()),
                start_ns=self.began_ns,
                end_ns=time.time_ns(),
            )
            self.trace.tracer.record(span)

    # --- pipeline --------------------------------------------------------------------------

    def _begin(self) -> None:
        state = self.state
        if state.proposed is None:
            self._propose()
            return
        # Continued after a restart: the same spec and validation as a live call.
        if not self._load_spec():
            return
        pending = state.pending_approval
        if pending is not None:
            self._await(pending.approval_id, pending.expires_at_ms / 1000 - time.time())
        elif self.proceed:
            self._act()
        elif state.decided is None or state.decided.outcome == "allow":
            self._decide()  # a batch's read-only call the crash cut off: decided again

    def _load_spec(self) -> bool:
        """The tool's spec and validated arguments; False (and the invocation completed) when
        the tool is unknown or the arguments invalid."""
        name = self.call.name
        try:
            self.spec = self.s.catalog.spec(name)
        except UnknownTool:
            self._complete(*unknown_tool(self._deciding(), self.s.catalog.names()))
            return False
        try:
            self.args = self.s.catalog.validate(name, self.call.arguments or "{}")
        except InvalidArguments as exc:
            self._complete(
                refused(self._deciding(), f"invalid arguments for {name}: {exc}", "invalid")
            )
            return False
        vault = self.s.vault
        for handle in handles_of(self.args):
            if vault is None or not vault.has(handle):
                self._complete(
                    refused(
                        self._deciding(), f"vault handle {handle[:64]!r} names no secret", "invalid"
                    )
                )
                return False
        return True

    def _propose(self) -> None:
        proposed = propose(self.state, self.call, run_id=self.run_id, session_id=self.session_id)
        self.held = proposed
        if self._load_spec():
            self._decide()

    def _decide(self) -> None:
        """Posture, Cedar, grants and ``vault.use`` (the gate), recorded as ``tool.decided``;
        then execute, ask a human, or record the refusal."""
        assert self.spec is not None
        assert self.args is not None
        deciding_ns = time.time_ns()
        decision = self.s.gate.decide(
            self.spec,
            args=self.args,
            principal=self.principal,
            session_id=self.session_id,
            run_id=self.run_id,
            channel=self.channel,
            session_grants=self.session_grants,
            posture_overrides=self.posture_overrides,
        )
        if decision.outcome == "approval_required":
            refusal = self.s.catalog.precheck(self.spec.name, self.args)
            if refusal is not None:  # a human's yes could not make it run: do not ask
                decision = msgspec.structs.replace(
                    decision, outcome="deny", reason=f"refused before asking: {refusal}"
                )
        decided_ns = time.time_ns()
        approval_id = new_id()
        timeout = self.s.config.approval_timeout_s
        if decision.outcome == "approval_required":
            # Routable before it is visible: a decision arriving as soon as the request is on
            # the journal waits in this actor's inbox instead of being refused.
            self.routed = approval_id
            self.s.registry.approval_pending(approval_id, self.run_id, self.actor_ref)
        events = judged(
            self._deciding(),
            decision,
            risk=self.spec.risk,
            approval_id=approval_id,
            now_ms=time.time_ns() // 1_000_000,
            timeout_s=timeout,
        )
        if decision.outcome in ("allow", "approval_required"):
            self._append(*events)
        else:
            self._complete(*events)
        if self.trace is not None:
            span = decision_span(
                self.trace,
                self.state,
                span_id=new_span_id(),
                start_ns=deciding_ns,
                end_ns=decided_ns,
            )
            self.trace.tracer.record(span)
        if decision.outcome == "allow":
            self._execute()
        elif decision.outcome == "approval_required":
            self._await(approval_id, timeout)

    def _await(self, approval_id: str, remaining_s: float) -> None:
        """Route decisions for ``approval_id`` here and deny it when ``remaining_s`` ends."""
        self.routed = approval_id
        self.s.registry.approval_pending(approval_id, self.run_id, self.actor_ref)
        if self.trace is not None:
            self.waiting = (approval_id, time.time_ns())
        ref = self.actor_ref
        self.timer = self.s.io.call_later(
            max(remaining_s, 0.0), lambda: _tell_quietly(ref, ApprovalTimedOut(approval_id))
        )

    def _resolve(self, message: ResolveApproval) -> None:
        try:
            self._settle(message)
        except (ApprovalAlreadyResolved, InvalidCommand) as exc:
            reject(message.reply, exc)
            return
        except Exception as exc:  # the append failed: the caller hears it, on_failure contains
            reject(message.reply, exc)
            raise
        resolve(message.reply, True)

    def _settle(self, message: ResolveApproval) -> None:
        """Record a decision (raises :class:`ApprovalAlreadyResolved` unless its approval is
        pending here, :class:`InvalidCommand` for a binding the tool cannot take); the run then
        resumes and tells this actor to proceed."""
        check_decision(
            self.spec.args_type if self.spec is not None else None,
            message.decision,
            message.scope,
            message.match,
            message.prefix,
        )
        event = resolution(
            self.state,
            approval_id=message.approval_id,
            decision=message.decision,
            scope=message.scope,
            match=message.match,
            prefix=message.prefix,
            digest=arguments_digest(self.args) if self.args is not None else b"",
            decided_by=message.principal,
            reason=message.reason,
            grant_principal=self.principal,
            now_ms=time.time_ns() // 1_000_000,
        )
        self._append(event, principal=message.principal)
        self._close_approval()
        self._trace_approval()
        if event.decision == "allow" and event.scope == "always" and event.tool:
            # In force on this node before the approver hears back; a read that fails leaves
            # it to the gate's follower (a grant folded late asks for one approval more).
            with contextlib.suppress(JournalError):
                self.s.gate.sync_grants()

    def _on_cancel(self, reason: str) -> None:
        """The run is stopping: deny a pending approval and close the invocation now."""
        if self.state.pending_approval is not None:
            now_ms = time.time_ns() // 1_000_000
            self._complete(
                *withdrawn(self.state, reason, grant_principal=self.principal, now_ms=now_ms),
                principal="node",
            )
        elif self.state.resolution is not None and self.state.completed is None:
            self._complete(refused(self.state, "cancelled before it ran", "cancelled"))

    def _act(self) -> None:
        """After the decision: record a denial, or execute."""
        if self.finished or self.state.resolution is None:
            return
        denied = denial(self.state)
        if denied is not None:
            self._complete(denied)
        else:
            self._execute()

    def _execute(self) -> None:
        assert self.spec is not None
        if self.cancel.is_set():
            self._complete(refused(self.state, "cancelled before it ran", "cancelled"))
            return
        ctx = ExecutionContext.start(
            self.s.workspace,
            self.spec.timeout_s,
            self.cancel,
            output_budget_bytes=TOOL_OUTPUT_BUDGET,
            principal=self.principal,
            session_id=self.session_id,
            invocation_id=self.state.invocation_id,
            secrets=None if self.s.vault is None else self.s.vault.resolve,
        )
        executing_ns = time.time_ns()
        result = self._scrubbed(self.s.catalog.execute(self.spec.name, self.args, ctx))
        executed_ns = time.time_ns()
        if result.workspace is not None:  # what the call changed, before its result
            checkpoints.record(
                self.s.journal,
                result.workspace,
                principal=self.principal,
                correlation_id=self.run_id,
                causation_id=self.state.invocation_id,
                tool=self.spec.name,
                invocation_id=self.state.invocation_id,
                run_id=self.run_id,
                session_id=self.session_id,
            )
        done = completed(self.state, result)
        if self.trace is not None:
            span = execute_span(
                self.trace, done, span_id=new_span_id(), start_ns=executing_ns, end_ns=executed_ns
            )
            self.trace.tracer.record(span)
        try:
            self._complete(done)
        except ConcurrencyConflict:
            raise
        except AppendRejected as exc:
            # Redaction can lengthen the output past the budget (a marker longer than the
            # secret it replaces); nothing was written, so record that instead of crashing.
            self._complete(refused(self.state, f"the result could not be recorded: {exc}", "limit"))

    def _scrubbed(self, result: ToolResult) -> ToolResult:
        """``result`` with every value of the vault (in each form a runtime may echo it)
        replaced, before the detectors' pass on the append: the model never sees one."""
        terms = self.s.vault.terms() if self.s.vault is not None else None
        if not terms:
            return result
        output, found = terms.scrub(result.output)
        error, more = terms.scrub(result.error) if result.error else (result.error, 0)
        if not found + more:
            return result
        return msgspec.structs.replace(result, output=output, error=error)

    def _trace_approval(self) -> None:
        """Record the traced approval's wait, once it has ended (decided, timed out, or the
        call ended without a decision)."""
        if self.trace is None or self.waiting is None:
            return
        approval_id, start_ns = self.waiting
        self.waiting = None
        resolved = self.state.resolution
        if resolved is not None and resolved.approval_id != approval_id:
            resolved = None
        span = approval_span(
            self.trace,
            approval_id,
            resolved,
            span_id=new_span_id(),
            start_ns=start_ns,
            end_ns=time.time_ns(),
        )
        self.trace.tracer.record(span)

    def _close_approval(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.routed is not None:
            self.s.registry.approval_closed(self.routed)
            self.routed = None


def _tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> None:
    """Tell, ignoring an actor that has already stopped (a late timer, a finished run)."""
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
