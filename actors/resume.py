"""Resuming a run that a restart found waiting for an approval.

A run stopped by a crash or a drain while it waited for a human is not lost: its conversation,
counters and the calls still to make are all on the journal (``run.turn_completed`` records the
proposed calls), so the node rebuilds the run actor in ``awaiting_approval`` and the tool actor
with its approval pending again (or already decided, when an operator used ``reel approvals``
on the stopped data dir). Any other in-flight run is failed ``interrupted``.

Tool arguments come back redacted (secrets never reach the journal), so a resumed call runs
with the redaction marker where a secret was.
"""

from __future__ import annotations

import msgspec

from actors.history import model_input, prior_turns
from actors.provider import ChatMessage, ToolCall
from actors.session_state import fold
from actors.tool_content import model_content
from events import JournalReader, StoredEvent
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    RunAccepted,
    RunOutput,
    RunTurnCompleted,
    ToolCompleted,
    ToolProposed,
)


class ResumedInvocation(msgspec.Struct, frozen=True, kw_only=True):
    """The tool call a resumed run waits on."""

    invocation_id: str
    call: ToolCall
    next_seq: int
    approval: ApprovalRequested
    requested_at_ms: int
    resolution: ApprovalResolved | None = None


class ResumePlan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a RunActor needs to continue where the journal says the run stopped."""

    run_id: str
    session_id: str
    principal: str
    channel: str | None
    text: str
    next_seq: int
    turn: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    messages: tuple[ChatMessage, ...]
    pending: tuple[ToolCall, ...]
    invocation: ResumedInvocation
    grants: tuple[str, ...] = ()
    postures: tuple[tuple[str, str], ...] = ()
    clock_spent_s: float = 0.0
    """Wall-clock budget already used (time in progress, not awaiting approval)."""


def plan_resume(
    reader: JournalReader, run_id: str, events: list[StoredEvent], system_prompt: str
) -> ResumePlan | None:
    """A plan when the run is waiting for an approval (pending or decided but not acted on);
    None when it must be failed ``interrupted`` instead."""
    run_events = [e for e in events if e.stream == f"run/{run_id}"]
    if not run_events or run_events[-1].kind != "run.awaiting_approval":
        return None
    accepted = next((e for e in events if e.kind == "run.accepted"), None)
    if accepted is None:
        return None
    start = accepted.decode()
    assert isinstance(start, RunAccepted)
    tools: dict[str, list[StoredEvent]] = {}
    for stored in events:
        if stored.stream.startswith("tool/"):
            tools.setdefault(stored.stream, []).append(stored)
    by_call: dict[str, list[StoredEvent]] = {}
    for stream_events in tools.values():
        first = stream_events[0].decode()
        if isinstance(first, ToolProposed):
            by_call[first.call_id] = stream_events
    session = fold(e.decode() for e in reader.read_stream(f"session/{start.session_id}"))
    history = session.history if session is not None else ()
    prior = history[: history.index(run_id)] if run_id in history else history
    messages = model_input(system_prompt, prior_turns(reader, prior), start.text)
    outputs: dict[int, list[str]] = {}
    turns: list[RunTurnCompleted] = []
    for stored in run_events:
        event = stored.decode()
        if isinstance(event, RunOutput):
            outputs.setdefault(event.turn, []).append(event.text)
        elif isinstance(event, RunTurnCompleted):
            turns.append(event)
    if not turns or not turns[-1].calls:
        return None
    waiting: ResumedInvocation | None = None
    pending: list[ToolCall] = []
    for turn in turns:
        calls = [ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"]) for c in turn.calls]
        messages.append(
            ChatMessage(
                role="assistant",
                content="".join(outputs.get(turn.turn, [])),
                tool_calls=tuple(calls),
            )
        )
        for call in calls:
            if waiting is not None:
                pending.append(call)
                continue
            invocation = by_call.get(call.id)
            if invocation is None:
                return None  # a call that never started while no approval was open: not ours
            completed = _completed(invocation)
            if completed is not None:
                messages.append(
                    ChatMessage(
                        role="tool",
                        content=model_content(completed),
                        tool_call_id=call.id,
                        name=call.name,
                    )
                )
                continue
            waiting = _waiting(call, invocation)
            if waiting is None:
                return None
    if waiting is None:
        return None
    return ResumePlan(
        run_id=run_id,
        session_id=start.session_id,
        principal=accepted.principal,
        channel=start.channel,
        text=start.text,
        next_seq=run_events[-1].stream_seq + 1,
        turn=len(turns),
        tool_calls=len(by_call),
        prompt_tokens=sum(t.prompt_tokens for t in turns),
        completion_tokens=sum(t.completion_tokens for t in turns),
        messages=tuple(messages),
        pending=tuple(pending),
        invocation=waiting,
        grants=session.grants if session is not None else (),
        clock_spent_s=_time_in_progress(run_events),
        postures=session.postures if session is not None else (),
    )


def _time_in_progress(run_events: list[StoredEvent]) -> float:
    """Seconds the run spent in progress, from its state events' commit times."""
    spent_ms = 0
    since: int | None = None
    for stored in run_events:
        if stored.kind in ("run.started", "run.resumed"):
            since = stored.recorded_at_ms
        elif stored.kind == "run.awaiting_approval" and since is not None:
            spent_ms += stored.recorded_at_ms - since
            since = None
    return spent_ms / 1000


def _completed(stream_events: list[StoredEvent]) -> ToolCompleted | None:
    last = stream_events[-1].decode()
    return last if isinstance(last, ToolCompleted) else None


def _waiting(call: ToolCall, stream_events: list[StoredEvent]) -> ResumedInvocation | None:
    request: ApprovalRequested | None = None
    requested_at = 0
    resolution: ApprovalResolved | None = None
    for stored in stream_events:
        event = stored.decode()
        if isinstance(event, ApprovalRequested):
            request, requested_at = event, stored.recorded_at_ms
        elif isinstance(event, ApprovalResolved):
            resolution = event
    last_kind = stream_events[-1].kind
    if request is None or last_kind not in ("tool.approval_requested", "tool.approval_resolved"):
        return None
    return ResumedInvocation(
        invocation_id=stream_events[0].stream.removeprefix("tool/"),
        call=call,
        next_seq=stream_events[-1].stream_seq + 1,
        approval=request,
        requested_at_ms=requested_at,
        resolution=resolution,
    )
