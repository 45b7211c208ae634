"""A run's state: a pure fold of its tape (its ``run.accepted`` on the session's stream, its
own events and its tool invocations'), an :class:`actors.aggregate.Aggregate`.

The live :class:`actors.runs.actor.RunActor` folds every event as it is appended (its own, and the
ones its tool actors report), and start-up recovery folds the same records read back from the
journal (``fold(actors.runs.state, tape)``), through the same :func:`apply`. Nothing else sets a
run's state, so a run after a restart is exactly the run before it.

Inputs are :class:`actors.stream.Recorded` events: the redacted event as stored, its stream,
its commit time and its principal. Times (the wall-clock budget) come from commit times, never
from a local clock. The fold is total: a status change the run's machine forbids
(:mod:`actors.runs.status`) is refused before it is appended (:func:`check`), so the fold of a
journal never meets one, and ignores it if it does.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from msgspec.structs import replace

from actors.approvals.grants import Grant, grant_of
from actors.errors import IllegalTransition
from actors.provider import ToolCall
from actors.runs.references import MAX_REFERENCES, Reference
from actors.runs.references import parse as parse_references
from actors.runs.status import apply as apply_status
from actors.stream import Recorded
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    RunAccepted,
    RunAwaitingApproval,
    RunCancelRequested,
    RunContextAssembled,
    RunOutput,
    RunStarted,
    RunTurnCompleted,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from events.lifecycle import REFERENCE_CALL_PREFIX, TERMINAL_EVENTS, RunEnd, RunStatus


class Turn(msgspec.Struct, frozen=True):
    """One finished provider call: what the model wrote and the calls it proposed."""

    number: int
    text: str
    calls: tuple[ToolCall, ...]


class RunState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a run knows, folded from its tape."""

    run_id: str
    session_id: str
    principal: str
    """Who the run acts for (the principal that sent the message)."""
    channel: str | None
    text: str
    """The user's message, as stored (redacted)."""
    status: RunStatus = RunStatus.ACCEPTED
    next_seq: int = 0
    """The ``stream_seq`` the run's next event on ``run/<id>`` gets."""
    max_turns: int = 0
    max_tool_calls: int = 0
    wall_clock_s: float = 0.0
    """The budgets the run started with (``run.started``)."""
    output: tuple[str, ...] = ()
    """Output chunks of the turn in progress."""
    turns: tuple[Turn, ...] = ()
    invocations: tuple[tuple[str, str], ...] = ()
    """(call id, invocation id) of every tool call started, in order."""
    results: tuple[tuple[str, ToolCompleted], ...] = ()
    """(call id, result) of every tool call that completed."""
    approval_id: str | None = None
    """The approval the run's current tool call waits for (requested, not yet resolved)."""
    approval_invocation: str | None = None
    """The invocation that asked for the last approval, until it completes (in a batch of
    read-only calls it may ask while the calls before it still run)."""
    allowed: tuple[str, ...] = ()
    """Invocations decided ``allow`` without asking anyone, until they complete (running)."""
    resolved: ApprovalResolved | None = None
    """The decision on the current call's approval, until the call completes."""
    marked: str | None = None
    """The approval the run last recorded itself waiting for (``run.awaiting_approval``): a
    decision on any other was made before the run could mark it (then a crash cut in)."""
    session_grants: tuple[Grant, ...] = ()
    """Grants with scope ``session`` made during this run."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    spent_ms: int = 0
    """Time in progress before ``since_ms`` (waiting for a human does not count)."""
    since_ms: int | None = None
    """When the run last went in progress (None while it is not)."""
    references: tuple[Reference, ...] = ()
    """The message's ``@kind:target`` references (parsed from ``text``, so the same after a
    restart); those past :data:`actors.runs.references.MAX_REFERENCES` are noted, not read."""
    context: RunContextAssembled | None = None
    """What went into the model input besides the message (before the first turn)."""
    cancel_requested_by: str | None = None
    """Who asked for the cancel recorded by ``run.cancel_requested`` (the run only ends)."""
    end: RunEnd | None = None

    @property
    def stream(self) -> str:
        return f"run/{self.run_id}"

    @property
    def tool_calls(self) -> int:
        """Tool calls the model started (each proposed call counts, whatever became of it;
        the calls that read the message's references do not)."""
        return sum(1 for call, _ in self.invocations if not call.startswith(REFERENCE_CALL_PREFIX))

    def reference_calls(self) -> tuple[ToolCall, ...]:
        """The governed calls that read the message's file and URL references."""
        calls = (r.call() for r in self.references[:MAX_REFERENCES])
        return tuple(c for c in calls if c is not None)

    def invocation_of(self, call_id: str) -> str | None:
        return next((inv for call, inv in self.invocations if call == call_id), None)

    def result_of(self, call_id: str) -> ToolCompleted | None:
        return next((done for call, done in self.results if call == call_id), None)

    def open_calls(self) -> tuple[ToolCall, ...]:
        """The calls without a result yet, in proposal order: of the last turn, or before the
        first turn, of the reference calls (until the context is assembled)."""
        if not self.turns:
            if self.context is not None:
                return ()
            calls = self.reference_calls()
        else:
            calls = self.turns[-1].calls
        return tuple(c for c in calls if self.result_of(c.id) is None)

    def open_call(self) -> ToolCall | None:
        """The first call without a result yet (:meth:`open_calls`)."""
        return next(iter(self.open_calls()), None)

    def spent_s(self, now_ms: int | None = None) -> float:
        """Wall-clock budget used; counts up to ``now_ms`` while in progress."""
        running = 0 if self.since_ms is None or now_ms is None else now_ms - self.since_ms
        return (self.spent_ms + max(running, 0)) / 1000


def start(accepted: RunAccepted, principal: str) -> RunState:
    """The state right after ``run.accepted`` (stored on the session's stream)."""
    return RunState(
        run_id=accepted.run_id,
        session_id=accepted.session_id,
        principal=principal,
        channel=accepted.channel,
        text=accepted.text,
        references=parse_references(accepted.text),
    )


def initial(first: Recorded) -> RunState | None:
    """The run its ``run.accepted`` (on the session's stream) starts; None for another record."""
    event = first.event
    if not isinstance(event, RunAccepted) or first.stream != f"session/{event.session_id}":
        return None
    return start(event, first.principal)


def apply(state: RunState, rec: Recorded) -> RunState:
    """Fold one record of the run's tape (total: see the module docstring)."""
    event, at = rec.event, rec.at_ms
    if rec.stream == state.stream:
        state = replace(state, next_seq=state.next_seq + 1)
    try:
        status = apply_status(state.status, event)
    except IllegalTransition:
        return state
    if status is not None and status is not state.status:
        state = replace(state, status=status, **_clock(state, status, at))
    if isinstance(event, RunStarted):
        return replace(
            state,
            max_turns=event.max_turns,
            max_tool_calls=event.max_tool_calls,
            wall_clock_s=event.wall_clock_s,
        )
    if isinstance(event, RunContextAssembled):
        return replace(state, context=event)
    if isinstance(event, RunOutput):
        return replace(state, output=(*state.output, event.text))
    if isinstance(event, RunTurnCompleted):
        calls = tuple(
            ToolCall(id=c.get("id", ""), name=c.get("name", ""), arguments=c.get("arguments", ""))
            for c in event.calls
        )
        turn = Turn(number=event.turn, text="".join(state.output), calls=calls)
        return replace(
            state,
            output=(),
            turns=(*state.turns, turn),
            prompt_tokens=state.prompt_tokens + event.prompt_tokens,
            completion_tokens=state.completion_tokens + event.completion_tokens,
        )
    if isinstance(event, ToolProposed):
        return replace(
            state, invocations=(*state.invocations, (event.call_id, event.invocation_id))
        )
    if isinstance(event, ToolDecided):
        if event.outcome != "allow":
            return state
        return replace(state, allowed=(*state.allowed, event.invocation_id))
    if isinstance(event, ApprovalRequested):
        return replace(
            state,
            approval_id=event.approval_id,
            resolved=None,
            approval_invocation=event.invocation_id,
        )
    if isinstance(event, ApprovalResolved) and event.approval_id == state.approval_id:
        grants = state.session_grants
        if event.decision == "allow" and event.scope == "session" and event.tool:
            grants = (*grants, grant_of(event))
        return replace(state, approval_id=None, resolved=event, session_grants=grants)
    if isinstance(event, ToolCompleted):
        call_id = next((c for c, inv in state.invocations if inv == event.invocation_id), None)
        if call_id is None:
            return state
        state = replace(
            state,
            results=(*state.results, (call_id, event)),
            allowed=tuple(i for i in state.allowed if i != event.invocation_id),
        )
        if state.approval_invocation not in (None, event.invocation_id):
            return state  # a read-only call before the one that asked for the approval
        # A call closed without a decision (unknown tool after a restart, a failed tool actor)
        # leaves no approval behind either.
        return replace(state, resolved=None, approval_id=None, approval_invocation=None)
    if isinstance(event, RunAwaitingApproval):
        return replace(state, marked=event.approval_id)
    if isinstance(event, RunCancelRequested):
        return replace(state, cancel_requested_by=event.requested_by)
    if isinstance(event, TERMINAL_EVENTS):
        return replace(state, end=event)
    return state


def _clock(state: RunState, status: RunStatus, at_ms: int) -> dict[str, int | None]:
    """Start or stop counting wall-clock time as the run enters or leaves ``in_progress``."""
    if status is RunStatus.IN_PROGRESS:
        return {"since_ms": at_ms}
    if state.since_ms is not None:
        return {"spent_ms": state.spent_ms + max(at_ms - state.since_ms, 0), "since_ms": None}
    return {}


def check(state: RunState, events: Iterable[Event]) -> None:
    """Raise :class:`IllegalTransition` unless the run's machine allows ``events`` after
    ``state`` (the run actor asks before it appends: a bug is never recorded)."""
    status: RunStatus | None = state.status
    for event in events:
        status = apply_status(status, event)
