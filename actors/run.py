"""RunActor: the agent loop of one run, owning the stream ``run/<run_id>``.

Each turn streams the provider on the node's I/O loop (items come back as messages), appends the
output as coalesced ``run.output`` chunks and a ``run.turn_completed`` with usage, then either
completes with the final answer or runs the proposed tool calls one by one (each in its own
:class:`ToolInvocationActor`) and starts the next turn with their results. Budgets (turns, tool
calls, wall clock) and cancellation end the run with a recorded reason. Cancellation stops the
provider task and sets the in-flight tool's cancel event at once; the terminal event is written
when the tool has stopped (or after a short grace), so it is always the run's last event.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

import pykka

from actors.coalesce import Coalescer
from actors.errors import RunNotActive
from actors.history import model_input
from actors.io_loop import Timer
from actors.messages import (
    ApprovalPending,
    ApprovalSettled,
    BeginRun,
    CancelGraceExpired,
    CancelRun,
    CancelTool,
    FlushTick,
    GrantAdded,
    ProviderDone,
    ProviderFailed,
    ProviderItem,
    RunFinished,
    ToolFinished,
    ToSession,
    WallClockExpired,
    reject,
    resolve,
)
from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderRequest,
    TextDelta,
    ToolCall,
    TurnEnd,
    Usage,
)
from actors.resume import ResumePlan
from actors.run_state import RunStatus, apply
from actors.services import Services
from actors.stream import OwnedStream
from actors.tool_invocation import ToolInvocationActor
from events import new_id
from events.catalog import (
    Event,
    RunAwaitingApproval,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunOutput,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
)


class RunActor(pykka.ThreadingActor):
    """One run's loop. Started by its session after ``run.accepted`` is durable."""

    use_daemon_thread = True

    def __init__(
        self,
        services: Services,
        *,
        run_id: str,
        session_id: str,
        text: str,
        principal: str,
        channel: str | None,
        prior: tuple[ChatMessage, ...],
        grants: tuple[str, ...],
        postures: dict[str, str] | None = None,
        cancelled_by: str | None = None,
        resume: ResumePlan | None = None,
    ) -> None:
        super().__init__()
        self.s = services
        self.run_id = run_id
        self.session_id = session_id
        self.text = text
        self.principal = principal
        self.channel = channel
        self.prior = prior
        self.grants = set(grants)
        self.postures = dict(postures or {})
        self.cancelled_by = cancelled_by
        self.out = OwnedStream(
            services.journal,
            f"run/{run_id}",
            principal=principal,
            correlation_id=run_id,
            causation_id=session_id,
        )
        self.status: RunStatus | None = RunStatus.ACCEPTED
        cfg = services.config
        self.budgets = cfg.budgets
        self.coalescer = Coalescer(cfg.chunk_max_words, cfg.chunk_max_age_s)
        self.messages: list[ChatMessage] = []
        self.turn = 0
        self.turn_text: list[str] = []
        self.turn_calls: list[ToolCall] = []
        self.turn_usage: Usage | None = None
        self.turn_finish = "stop"
        self.tool_calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.pending: deque[ToolCall] = deque()
        self.tool_cancel: threading.Event | None = None
        self.tool_ref: pykka.ActorRef[Any] | None = None
        self.provider_task: Future[None] | None = None
        self.flush_timer: Timer | None = None
        self.clock_timer: Timer | None = None
        self.clock_generation = 0
        self.clock_started = 0.0
        self.clock_spent = 0.0
        self.ending: tuple[str, str, str] | None = None
        """(terminal kind, reason, message) once a stop was decided but not yet written."""
        self.ended = False
        self.resume = resume

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        self.s.registry.run_started(self.run_id, self.session_id, self.actor_ref)
        # The work runs as a message, not in on_start: pykka contains (on_failure) only what
        # fails in on_receive, and a run must always reach a terminal event.
        self.actor_ref.tell(BeginRun())

    def _begin(self) -> None:
        if self.cancelled_by is not None:
            self._write_end(("cancelled", "cancelled", self.cancelled_by))
            return
        if self.resume is not None:
            self._resume(self.resume)
            return
        self._append(
            RunStarted(
                run_id=self.run_id,
                max_turns=self.budgets.max_turns,
                max_tool_calls=self.budgets.max_tool_calls,
                wall_clock_s=self.budgets.wall_clock_s,
                provider=self.s.provider.name,
            )
        )
        self.messages = model_input(self.s.config.system_prompt, self.prior, self.text)
        self._start_clock(self.budgets.wall_clock_s)
        self._next_turn()

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, BeginRun):
            self._begin()
            return None
        if self.ended:
            if isinstance(message, CancelRun):
                reject(message.reply, RunNotActive(f"run {self.run_id} has already ended"))
            return None
        if isinstance(message, ProviderItem):
            self._on_item(message)
        elif isinstance(message, ProviderDone):
            if message.turn == self.turn and self.ending is None:
                self._on_turn_done()
        elif isinstance(message, ProviderFailed):
            if message.turn == self.turn and self.ending is None:
                self._stop_with(("failed", "provider_error", message.message))
        elif isinstance(message, FlushTick):
            self.flush_timer = None
            if message.turn == self.turn and self.ending is None:
                self._flush(force=False)
        elif isinstance(message, ToolFinished):
            self._on_tool_finished(message)
        elif isinstance(message, ApprovalPending):
            self._pause_clock()
            self._append(RunAwaitingApproval(run_id=self.run_id, approval_id=message.approval_id))
        elif isinstance(message, ApprovalSettled):
            if self.status is RunStatus.AWAITING_APPROVAL and self.ending is None:
                self._append(RunResumed(run_id=self.run_id, approval_id=message.approval_id))
                self._start_clock(self.budgets.wall_clock_s - self.clock_spent)
        elif isinstance(message, CancelRun):
            if self.ending is not None:
                resolve(message.reply, True)
            else:
                self._stop_with(("cancelled", "cancelled", message.principal))
                resolve(message.reply, True)
        elif isinstance(message, WallClockExpired):
            if message.generation == self.clock_generation and self.ending is None:
                limit = self.budgets.wall_clock_s
                self._stop_with(("failed", "wall_clock", f"the run exceeded {limit:g} s"))
        elif isinstance(message, CancelGraceExpired) and self.ending is not None:
            self._write_end(self.ending)
        return None

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Contain a crash: record it as the run's end and tell the session."""
        if self.ended:
            return
        self._cancel_io()
        if self.tool_cancel is not None:
            self.tool_cancel.set()
        with contextlib.suppress(Exception):
            name = exc_type.__name__ if exc_type else "error"
            self._write_end(("failed", "internal_error", f"{name}: {exc}"))
        self.ended = True
        self.s.registry.run_ended(self.run_id)

    def _resume(self, plan: ResumePlan) -> None:
        """Continue a run a restart found waiting for an approval (see actors.resume)."""
        self.out.next_seq = plan.next_seq
        self.status = RunStatus.AWAITING_APPROVAL
        self.clock_spent = plan.clock_spent_s
        self.turn = plan.turn
        self.tool_calls = plan.tool_calls
        self.prompt_tokens = plan.prompt_tokens
        self.completion_tokens = plan.completion_tokens
        self.messages = list(plan.messages)
        self.pending = deque(plan.pending)
        self.grants = set(plan.grants)
        self.postures = dict(plan.postures)
        self.tool_cancel = threading.Event()
        self.tool_ref = ToolInvocationActor.start(
            self.s,
            invocation_id=plan.invocation.invocation_id,
            run_id=self.run_id,
            session_id=self.session_id,
            principal=self.principal,
            channel=self.channel,
            call=plan.invocation.call,
            run_ref=self.actor_ref,
            cancel=self.tool_cancel,
            session_grants=tuple(sorted(self.grants)),
            posture_overrides=self.postures,
            resume=plan.invocation,
        )

    # --- journal ---------------------------------------------------------------------------

    def _append(self, *events: Event) -> None:
        self.out.append(*events)
        for event in events:
            self.status = apply(self.status, event)

    # --- turns -----------------------------------------------------------------------------

    def _next_turn(self) -> None:
        if self.turn >= self.budgets.max_turns:
            n = self.budgets.max_turns
            self._stop_with(("failed", "max_turns", f"the run used its {n} turns"))
            return
        self.turn += 1
        self.turn_text, self.turn_calls, self.turn_usage = [], [], None
        self.turn_finish = "stop"
        request = ProviderRequest(messages=tuple(self.messages), tools=self.s.tool_definitions)
        self.provider_task = self.s.io.submit(self._pump(request, self.turn))

    async def _pump(self, request: ProviderRequest, turn: int) -> None:
        """On the I/O loop: forward the provider stream to this actor as messages."""
        ref = self.actor_ref
        try:
            stream = self.s.provider.stream(request)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    ref.tell(ProviderItem(turn, item))
            ref.tell(ProviderDone(turn))
        except asyncio.CancelledError:
            raise
        except pykka.ActorDeadError:
            return
        except ProviderError as exc:
            _tell(ref, ProviderFailed(turn, exc.message))
        except Exception as exc:
            _tell(ref, ProviderFailed(turn, f"{type(exc).__name__}: {exc}"))

    def _on_item(self, message: ProviderItem) -> None:
        if message.turn != self.turn or self.ending is not None:
            return
        item = message.item
        if isinstance(item, TextDelta):
            self.turn_text.append(item.text)
            chunk = self.coalescer.add(item.text, time.monotonic())
            if chunk is not None:
                self._append(RunOutput(run_id=self.run_id, turn=self.turn, text=chunk))
            elif self.flush_timer is None:
                ref, turn = self.actor_ref, self.turn
                self.flush_timer = self.s.io.call_later(
                    self.coalescer.max_age_s, lambda: _tell(ref, FlushTick(turn))
                )
        elif isinstance(item, ToolCall):
            self.turn_calls.append(item)
        elif isinstance(item, Usage):
            self.turn_usage = item
        elif isinstance(item, TurnEnd):
            self.turn_finish = item.finish_reason

    def _flush(self, *, force: bool) -> None:
        if force or self.coalescer.due(time.monotonic()):
            chunk = self.coalescer.flush()
            if chunk is not None:
                self._append(RunOutput(run_id=self.run_id, turn=self.turn, text=chunk))
        elif self.flush_timer is None:
            ref, turn = self.actor_ref, self.turn
            self.flush_timer = self.s.io.call_later(
                self.coalescer.max_age_s, lambda: _tell(ref, FlushTick(turn))
            )

    def _on_turn_done(self) -> None:
        self.provider_task = None
        self._flush(force=True)
        usage = self.turn_usage or Usage(prompt_tokens=0, completion_tokens=0)
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        calls = self.turn_calls
        self._append(
            RunTurnCompleted(
                run_id=self.run_id,
                turn=self.turn,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                tool_calls=len(calls),
                finish_reason=self.turn_finish,
                calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls),
            )
        )
        text = "".join(self.turn_text)
        if not calls:
            self._write_end(("completed", "final_answer", text))
            return
        if self.tool_calls + len(calls) > self.budgets.max_tool_calls:
            n = self.budgets.max_tool_calls
            self._stop_with(("failed", "max_tool_calls", f"the run may make {n} tool calls"))
            return
        self.messages.append(ChatMessage(role="assistant", content=text, tool_calls=tuple(calls)))
        self.pending = deque(calls)
        self._next_tool()

    # --- tools -----------------------------------------------------------------------------

    def _next_tool(self) -> None:
        if not self.pending:
            self._next_turn()
            return
        call = self.pending.popleft()
        self.tool_calls += 1
        self.tool_cancel = threading.Event()
        self.tool_ref = ToolInvocationActor.start(
            self.s,
            invocation_id=new_id(),
            run_id=self.run_id,
            session_id=self.session_id,
            principal=self.principal,
            channel=self.channel,
            call=call,
            run_ref=self.actor_ref,
            cancel=self.tool_cancel,
            session_grants=tuple(sorted(self.grants)),
            posture_overrides=self.postures,
        )

    def _on_tool_finished(self, message: ToolFinished) -> None:
        self.tool_ref = None
        self.tool_cancel = None
        if self.ending is not None:
            self._write_end(self.ending)
            return
        if message.grant == "session" and message.tool not in self.grants:
            self.grants.add(message.tool)
            self._to_session(GrantAdded(tool=message.tool, approval_id=message.approval_id or ""))
        self.messages.append(
            ChatMessage(
                role="tool",
                content=message.content,
                tool_call_id=message.call_id,
                name=message.tool,
            )
        )
        self._next_tool()

    # --- ending ----------------------------------------------------------------------------

    def _stop_with(self, ending: tuple[str, str, str]) -> None:
        """Stop everything in flight; write the end now, or once the tool has stopped."""
        self.ending = ending
        self._cancel_io()
        self.pending.clear()
        if self.tool_ref is not None and self.tool_cancel is not None:
            self.tool_cancel.set()
            _tell(self.tool_ref, CancelTool(ending[1]))
            ref = self.actor_ref
            self.s.io.call_later(
                self.s.config.cancel_grace_s, lambda: _tell(ref, CancelGraceExpired())
            )
            return
        self._write_end(ending)

    def _write_end(self, ending: tuple[str, str, str]) -> None:
        if self.ended:
            return
        self._cancel_io()
        kind, reason, detail = ending
        counts: dict[str, Any] = {
            "turns": self.turn,
            "tool_calls": self.tool_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }
        self.coalescer.flush()  # a stopped turn's unflushed output is dropped, not recorded
        event: Event
        if kind == "completed":
            event = RunCompleted(run_id=self.run_id, answer=detail, reason=reason, **counts)
        elif kind == "cancelled":
            event = RunCancelled(run_id=self.run_id, reason=reason, requested_by=detail, **counts)
        else:
            event = RunFailed(run_id=self.run_id, reason=reason, message=detail, **counts)
        # Unrouted before the end is visible: whoever sees the terminal event and sends the
        # session its next message finds this run gone, not still live.
        self.s.registry.run_ended(self.run_id)
        self._append(event)
        self.ended = True
        assert self.status is not None
        answer = detail if kind == "completed" else None
        self._to_session(RunFinished(run_id=self.run_id, status=self.status.value, answer=answer))
        self.stop()

    def _to_session(self, message: Any) -> None:
        directory = self.s.directory
        if directory is not None:
            _tell(directory, ToSession(self.session_id, message))

    # --- timers and I/O --------------------------------------------------------------------

    def _start_clock(self, seconds: float) -> None:
        self.clock_generation += 1
        self.clock_started = time.monotonic()
        ref, generation = self.actor_ref, self.clock_generation
        self.clock_timer = self.s.io.call_later(
            max(seconds, 0.0), lambda: _tell(ref, WallClockExpired(generation))
        )

    def _pause_clock(self) -> None:
        if self.clock_timer is not None:
            self.clock_timer.cancel()
            self.clock_timer = None
            self.clock_spent += time.monotonic() - self.clock_started
            self.clock_generation += 1

    def _cancel_io(self) -> None:
        if self.provider_task is not None:
            self.provider_task.cancel()
            self.provider_task = None
        for timer in (self.flush_timer, self.clock_timer):
            if timer is not None:
                timer.cancel()
        self.flush_timer = self.clock_timer = None


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
