"""What a run does next, and which events each of its commands appends: pure functions of the
folded :class:`actors.runs.state.RunState`.

:func:`next_step` reads the state and names the one thing the run must do now. The live run actor
asks it after every change; start-up recovery asks it once per unfinished run, and
:func:`resumable` says which answers survive a restart (a run waiting for a human) and which do
not (machine work that was cut off: it is failed ``interrupted``, see :func:`interrupt`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from actors.invocations.decide import interrupt as interrupt_invocation
from actors.invocations.decide import recorded_name
from actors.invocations.state import InvocationState
from actors.provider import ToolCall, Usage
from actors.runs.state import RunState
from events.catalog import (
    Event,
    RunAwaitingApproval,
    RunCancelled,
    RunCancelRequested,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
)
from events.lifecycle import RunEnd, RunStatus

INTERRUPTED = "the node stopped while this was in flight"
BUDGET_EXCEEDED = "budget_exceeded"
"""The reason of a run ended at a turn boundary by a hard budget (the message names it)."""

# --- steps -----------------------------------------------------------------------------------


class Start(msgspec.Struct, frozen=True):
    """Accepted, not started: append ``run.started``."""


class Assemble(msgspec.Struct, frozen=True):
    """The message's references are read: record what goes into the model input besides the
    message (``run.context_assembled``: memory, references, compaction, the estimate)."""


class CallModel(msgspec.Struct, frozen=True):
    """Ask the provider for turn ``turn``."""

    turn: int


class StartTool(msgspec.Struct, frozen=True):
    """Start the invocation of ``call`` (the next call of the last turn)."""

    call: ToolCall


class AwaitTool(msgspec.Struct, frozen=True):
    """A tool call is under way (proposed, deciding, executing): wait for its events."""

    call: ToolCall
    invocation_id: str


class ParallelCalls(msgspec.Struct, frozen=True):
    """Read-only calls of the turn run at once (:class:`Batching`). Each call of ``running``
    needs its tool actor (running, deciding, or asking a human: nothing after that one starts);
    ``start``, when set, is the next call to propose: every call before it was allowed, and
    fewer than the limit run. Results are recorded in proposal order (the tool actors wait for
    the one before), and a restart runs again those cut off: they change nothing."""

    running: tuple[tuple[ToolCall, str], ...]
    """(call, invocation id) in proposal order."""
    start: ToolCall | None


class MarkAwaiting(msgspec.Struct, frozen=True):
    """The current call asked for an approval: append ``run.awaiting_approval``."""

    approval_id: str


class WaitApproval(msgspec.Struct, frozen=True):
    """Awaiting a human decision on the current call's approval."""

    call: ToolCall
    invocation_id: str
    approval_id: str


class Resume(msgspec.Struct, frozen=True):
    """The approval was decided: append ``run.resumed``; the call then proceeds. Without a
    call, the call that waited was closed without a decision (its tool vanished after a
    restart, or its actor failed): the run only goes back in progress."""

    call: ToolCall | None
    invocation_id: str | None
    approval_id: str


class Finish(msgspec.Struct, frozen=True):
    """The run must end with ``end`` (a budget ran out)."""

    end: RunEnd


class Stopping(msgspec.Struct, frozen=True):
    """A cancel was recorded (``run.cancel_requested``): stop the call in flight, then end.
    Never resumed after a restart: a cancel the node acknowledged is not forgotten."""

    requested_by: str


class Ended(msgspec.Struct, frozen=True):
    """Terminal: nothing follows."""


Step = (
    Start
    | Assemble
    | CallModel
    | StartTool
    | AwaitTool
    | ParallelCalls
    | MarkAwaiting
    | WaitApproval
    | Resume
    | Finish
    | Stopping
    | Ended
)


@dataclass(frozen=True)
class Batching:
    """Which calls may run at once: ``reads_only`` says whether a call is read-only by its
    catalog entry (:meth:`tools.ToolCatalog.reads_only`), ``limit`` how many run at most
    (``[runs] max_parallel_tool_calls``)."""

    reads_only: Callable[[ToolCall], bool]
    limit: int


SEQUENTIAL = Batching(lambda _call: False, 1)
"""One call at a time (a caller that does not know the catalog)."""


def next_step(state: RunState, batching: Batching = SEQUENTIAL) -> Step:
    """The one thing the run must do now."""
    status = state.status
    if status.terminal:
        return Ended()
    if state.cancel_requested_by is not None:
        return Stopping(state.cancel_requested_by)
    if status is RunStatus.ACCEPTED:
        return Start()
    if (
        status is RunStatus.AWAITING_APPROVAL
        and state.approval_id is None
        and state.resolved is None
    ):
        return Resume(None, None, state.marked or "")
    calls = state.open_calls()
    batch = _batch(state, calls, batching)
    if batch is not None:
        return batch
    call = calls[0] if calls else None
    if call is not None:
        invocation_id = state.invocation_of(call.id)
        if invocation_id is None:
            return StartTool(call)
        if status is RunStatus.AWAITING_APPROVAL:
            if state.resolved is not None:
                return Resume(call, invocation_id, state.resolved.approval_id)
            assert state.approval_id is not None, "awaiting approval with none requested"
            return WaitApproval(call, invocation_id, state.approval_id)
        if state.approval_id is not None:
            return MarkAwaiting(state.approval_id)
        if state.resolved is not None and state.marked != state.resolved.approval_id:
            # Decided before the run marked itself waiting (a crash cut in): mark, then resume.
            return MarkAwaiting(state.resolved.approval_id)
        return AwaitTool(call, invocation_id)
    if state.context is None:
        return Assemble()
    if len(state.turns) >= state.max_turns:
        n = state.max_turns
        return Finish(end(state, "failed", "max_turns", f"the run used its {n} turns"))
    return CallModel(len(state.turns) + 1)


def _batch(
    state: RunState, calls: tuple[ToolCall, ...], batching: Batching
) -> ParallelCalls | None:
    """The leading read-only calls of ``calls`` as a batch, or None when the first open call
    runs alone: it may write, or it is the one waiting for a human (an approval is asked and
    acted on one call at a time, exactly as for any other call). A call that may write ends the
    batch, so it starts only once every call before it completed, and nothing after it starts
    before it completes."""
    if not calls or not batching.reads_only(calls[0]):
        return None
    head = state.invocation_of(calls[0].id)
    if head is not None and head == state.approval_invocation:
        return None
    running: list[tuple[ToolCall, str]] = []
    for call in calls:
        if not batching.reads_only(call):
            break
        invocation_id = state.invocation_of(call.id)
        if invocation_id is None:
            start = call if len(running) < batching.limit else None
            return ParallelCalls(tuple(running), start)
        running.append((call, invocation_id))
        if invocation_id not in state.allowed:
            break  # still deciding, or asking a human: the calls after it wait
    return ParallelCalls(tuple(running), None)


def assembles_when_started(state: RunState) -> bool:
    """Whether the run's step after :class:`Start` is :class:`Assemble` (it has no reference
    to read by a tool call first), so ``run.context_assembled`` goes in ``run.started``'s
    append. The context is decided from the accepted state: ``run.started`` changes only the
    status and the budgets, which :func:`~actors.runs.context.assembled` does not read."""
    then = msgspec.structs.replace(state, status=RunStatus.IN_PROGRESS)
    return isinstance(next_step(then), Assemble)


def resumable(step: Step) -> bool:
    """Whether a run whose next step is ``step`` continues after a restart.

    A run waiting for a human (or about to) loses nothing by the restart: the approval stays
    pending, or takes effect if it was decided meanwhile. A batch of read-only calls continues
    too: the results recorded stay, and the calls cut off run again (decided again first), which
    changes nothing they had not. Every other unfinished run was doing machine work that the
    crash cut off: it is failed ``interrupted``."""
    if isinstance(step, Resume):
        return step.call is not None
    return isinstance(step, MarkAwaiting | WaitApproval | ParallelCalls)


# --- commands --------------------------------------------------------------------------------


def started(
    state: RunState,
    *,
    max_turns: int,
    max_tool_calls: int,
    wall_clock_s: float,
    provider: str,
    model: str = "",
) -> RunStarted:
    """``run.started`` with the budgets the run will run under, and the configured model of
    its provider when there is one (the usage view's model for turns whose provider names
    none)."""
    return RunStarted(
        run_id=state.run_id,
        max_turns=max_turns,
        max_tool_calls=max_tool_calls,
        wall_clock_s=wall_clock_s,
        provider=provider,
        model=model or None,
    )


def cancel_requested(state: RunState, requested_by: str) -> RunCancelRequested:
    """``run.cancel_requested``: recorded before a cancel of a run with a call in flight is
    acknowledged (a run with nothing in flight ends ``cancelled`` at once instead)."""
    return RunCancelRequested(run_id=state.run_id, requested_by=requested_by)


def awaiting(state: RunState, step: MarkAwaiting) -> RunAwaitingApproval:
    return RunAwaitingApproval(run_id=state.run_id, approval_id=step.approval_id)


def resumed(state: RunState, step: Resume) -> RunResumed:
    return RunResumed(run_id=state.run_id, approval_id=step.approval_id)


def unusable_calls(calls: tuple[ToolCall, ...], finish_reason: str) -> str | None:
    """Why the calls of a turn cannot be made, or None when they can.

    A turn cut off at its token limit (``length``) may have cut a call anywhere, and arguments
    that are not JSON are not what the model meant to send: neither is proposed, and neither is
    sent back to the model (servers that parse the conversation refuse it). Empty arguments
    read as ``{}``; JSON that does not fit the tool's schema is the tool's to refuse. Names are
    given as :func:`~actors.invocations.decide.recorded_name` records them."""
    if not calls:
        return None
    names = ", ".join(f"{recorded_name(c.name)} ({c.id})" for c in calls)
    if finish_reason == "length":
        return (
            f"the model's turn was cut off at its token limit (finish_reason length) in tool "
            f"calls {names}; none was made (a larger [provider] max_tokens may help)"
        )
    for call in calls:
        if call.arguments.strip():
            try:
                msgspec.json.decode(call.arguments)
            except msgspec.DecodeError as exc:
                return (
                    f"the model's arguments for {recorded_name(call.name)} ({call.id}) are not "
                    f"valid JSON ({exc}); no call of the turn was made"
                )
    return None


def finish_turn(
    state: RunState,
    turn: int,
    usage: Usage,
    calls: tuple[ToolCall, ...],
    finish_reason: str,
    last_output: str = "",
) -> tuple[Event, ...]:
    """The events that close a turn, once all its output is on the tape: ``run.turn_completed``,
    then the run's end when the model gave a final answer, proposed more calls than the budget
    has left, or calls that cannot be made (:func:`unusable_calls`: the run fails
    ``provider_error`` with the reason, the turn is recorded with no calls). ``last_output``:
    the text (as stored) of the turn's last ``run.output``, appended with these events, so not
    folded into ``state`` yet."""
    unusable = unusable_calls(calls, finish_reason)
    kept = () if unusable else calls
    completed = RunTurnCompleted(
        run_id=state.run_id,
        turn=turn,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        tool_calls=len(kept),
        finish_reason=finish_reason,
        calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in kept),
        cached_tokens=usage.cached_tokens,
        model=usage.model,
        endpoint=usage.endpoint,
    )
    if unusable:
        return completed, end(state, "failed", "provider_error", unusable, closing=usage)
    if not calls:
        answer = "".join(state.output) + last_output
        return completed, end(state, "completed", "final_answer", answer, closing=usage)
    if state.tool_calls + len(calls) > state.max_tool_calls:
        why = f"the run may make {state.max_tool_calls} tool calls"
        return completed, end(state, "failed", "max_tool_calls", why, closing=usage)
    return (completed,)


EndKind = Literal["completed", "failed", "cancelled"]


def end(
    state: RunState, kind: EndKind, reason: str, detail: str, *, closing: Usage | None = None
) -> RunEnd:
    """The terminal event, with the run's totals. ``detail`` is the answer (completed), the
    message (failed) or who asked (cancelled); ``closing`` is the usage of a turn completed in
    the same append, not yet folded."""
    extra = closing or Usage(prompt_tokens=0, completion_tokens=0)
    counts = {
        "turns": len(state.turns) + (closing is not None),
        "tool_calls": state.tool_calls,
        "prompt_tokens": state.prompt_tokens + extra.prompt_tokens,
        "completion_tokens": state.completion_tokens + extra.completion_tokens,
    }
    if kind == "completed":
        return RunCompleted(run_id=state.run_id, answer=detail, reason=reason, **counts)
    if kind == "cancelled":
        return RunCancelled(run_id=state.run_id, reason=reason, requested_by=detail, **counts)
    return RunFailed(run_id=state.run_id, reason=reason, message=detail, **counts)


def interrupt(
    state: RunState, invocations: dict[str, InvocationState]
) -> list[tuple[str, int, tuple[Event, ...]]]:
    """What closes a run that a restart cannot continue: each unfinished invocation is
    completed ``interrupted`` (its pending approval denied ``interrupted`` first), then the run
    fails ``interrupted``, so the terminal event stays last in the tape. Returns
    (stream, expected seq, events) per append, in order: none for a run that already ended."""
    appends: list[tuple[str, int, tuple[Event, ...]]] = []
    if state.status.terminal:
        return appends
    for invocation in invocations.values():
        closing = interrupt_invocation(invocation, INTERRUPTED)
        if closing:
            appends.append((invocation.stream, invocation.next_seq, closing))
    failed = end(state, "failed", "interrupted", INTERRUPTED)
    appends.append((state.stream, state.next_seq, (failed,)))
    return appends
