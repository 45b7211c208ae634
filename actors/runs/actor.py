"""RunActor: the agent loop of one run, owning the stream ``run/<run_id>``.

A thin shell around :mod:`actors.runs.state` (the state) and :mod:`actors.runs.decide` (what to
do next, which events to append). Every event it appends, and every event its tool actors report
(:class:`ToolAppended`), is folded into ``self.state``; after each change it asks
:func:`next_step` and performs the step's effect: stream the provider on the node's I/O loop
(items come back as messages), start a :class:`ToolInvocationActor`, run the wall clock. A run
resumed after a restart is started with its folded state and continues through the same steps.

Read-only calls of a turn run at once (:class:`~actors.runs.decide.ParallelCalls`): one tool
actor each, started one after another as each is decided, each recording its result only after
the one before it (``after``/``done`` below), so the tape keeps proposal order.

Cancellation and budgets stop the provider task and set every in-flight tool's cancel event at
once; the terminal event is written when the tools have stopped (or after a short grace), so it
is always the run's last event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

import pykka

from actors.actor_threads import PooledActor
from actors.aggregate import fold
from actors.approvals.grants import Grant
from actors.errors import RunNotActive
from actors.invocations.actor import ToolInvocationActor
from actors.invocations.state import InvocationState
from actors.io_loop import Timer
from actors.messages import (
    BeginRun,
    CancelGraceExpired,
    CancelRun,
    CancelTool,
    FlushTick,
    GrantAdded,
    Proceed,
    ProviderFailed,
    ProviderItems,
    RunFinished,
    StallRun,
    ToolAppended,
    ToSession,
    WallClockExpired,
    reject,
    resolve,
)
from actors.provider import (
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ProviderUnavailable,
    TextDelta,
    ToolCall,
    TurnEnd,
    Usage,
)
from actors.runs import state as run_fold
from actors.runs.coalesce import Chunk, Coalescer
from actors.runs.context import (
    Injected,
    Prior,
    Read,
    assembled,
    injected_by,
    model_input,
    read_run,
)
from actors.runs.decide import (
    BUDGET_EXCEEDED,
    Assemble,
    AwaitTool,
    Batching,
    CallModel,
    EndKind,
    Finish,
    MarkAwaiting,
    ParallelCalls,
    Resume,
    Start,
    StartTool,
    Stopping,
    WaitApproval,
    assembles_when_started,
    awaiting,
    cancel_requested,
    end,
    finish_turn,
    next_step,
    resumed,
    started,
)
from actors.runs.references import MAX_REFERENCES, unescape
from actors.runs.state import RunState, apply, check
from actors.runs.trace import Searched, context_spans, run_span, turn_span
from actors.services import Services
from actors.stream import OwnedStream, recorded
from actors.tracing import new_span_id
from events import (
    ConcurrencyConflict,
    Fenced,
    JournalUnavailable,
    ShardNotOwned,
    new_id,
    redact_event,
)
from events.catalog import Event, RunCompleted, RunOutput, RunTurnCompleted, ToolCompleted
from events.lifecycle import TERMINAL_EVENTS, RunStatus

log = logging.getLogger("reel.run")


class _Turn:
    """The provider call in flight: what it has said so far, before ``run.turn_completed``."""

    __slots__ = ("calls", "finish", "number", "output_chars", "started_ns", "usage")

    def __init__(self, number: int, started_ns: int) -> None:
        self.number = number
        self.started_ns = started_ns
        self.calls: list[ToolCall] = []
        self.usage = Usage(prompt_tokens=0, completion_tokens=0)
        self.finish = "stop"
        self.output_chars = 0


class _Tool:
    """A tool actor working on one of the run's calls."""

    __slots__ = ("call_id", "cancel", "done", "ref")

    def __init__(
        self,
        call_id: str,
        ref: pykka.ActorRef[Any],
        cancel: threading.Event,
        done: threading.Event,
    ) -> None:
        self.call_id = call_id
        self.ref = ref
        self.cancel = cancel
        self.done = done
        """Set once the call's result is on the journal (or its actor is gone)."""


class RunActor(PooledActor):
    """One run's loop. Started by its session after ``run.accepted`` is durable, or by the node
    for a run that a restart found waiting for a human."""

    def __init__(
        self,
        services: Services,
        *,
        state: RunState,
        prior: Prior,
        grants: tuple[Grant, ...],
        postures: dict[str, str] | None = None,
        cancelled_by: str | None = None,
        invocations: tuple[InvocationState, ...] = (),
    ) -> None:
        super().__init__()
        self.s = services
        self.state = state
        self.prior = prior
        self.grants = {g.key: g for g in grants}
        """The session's ``session`` grants by :attr:`Grant.key` (offered to the gate)."""
        self.postures = dict(postures or {})
        self.cancelled_by = cancelled_by
        self.resumed = {i.invocation_id: i for i in invocations}
        """The folded invocations a restarted run continues (an approval, a batch's calls)."""
        self.out = OwnedStream(
            services.journal,
            state.stream,
            principal=state.principal,
            correlation_id=state.run_id,
            causation_id=state.session_id,
            home=state.session_id,
        )
        cfg = services.config
        self.coalescer = Coalescer(cfg.chunk_max_words, cfg.chunk_max_age_s)
        self.turn: _Turn | None = None
        self.tools: dict[str, _Tool] = {}
        """The tool actors at work, by invocation id (several in a batch of read-only calls)."""
        batching = services.batching()
        known: dict[str, bool] = {}

        def reads_only(call: ToolCall) -> bool:  # asked after every event: validate once
            if call.id not in known:
                known[call.id] = batching.reads_only(call)
            return known[call.id]

        self.batching = Batching(reads_only, batching.limit)
        self.provider_task: Future[None] | None = None
        self.flush_timer: Timer | None = None
        self.clock_timer: Timer | None = None
        self.clock_generation = 0
        self.ending: tuple[EndKind, str, str] | None = None
        """(kind, reason, detail) once a stop was decided but not yet written."""
        self.stopped_by: str | None = None
        """Who stopped the run when it is neither its own doing nor a cancel (the watchdog)."""
        self.ended = False
        self.tracer = services.tracer
        """Where the run's spans go (None: no telemetry, no span is built)."""
        self.began_ns = time.time_ns()
        """When this actor took the run up: the root span's start (a restarted run's trace
        goes on from its restart)."""

    @property
    def run_id(self) -> str:
        return self.state.run_id

    # --- pykka hooks -----------------------------------------------------------------------

    def on_start(self) -> None:
        self.s.registry.run_started(self.run_id, self.state.session_id, self.actor_ref)
        # The work runs as a message, not in on_start: pykka contains (on_failure) only what
        # fails in on_receive, and a run must always reach a terminal event.
        self.actor_ref.tell(BeginRun())

    def on_receive(self, message: Any) -> Any:
        try:
            self._receive(message)
        except JournalUnavailable as exc:  # not a crash: the database went away (a restart)
            log.warning(
                "run %s: the journal is unavailable (%s); the run ends failed once it is back",
                self.run_id,
                exc,
            )
            self._contain(f"{type(exc).__name__}: {exc}")
            with contextlib.suppress(pykka.ActorDeadError):
                self.stop()  # a second stop when the end was written: harmless
        except (ShardNotOwned, Fenced) as exc:  # a cluster node lost the session's shard
            log.warning(
                "run %s: this node no longer holds its session's shard (%s); the shard's new "
                "owner ends or resumes the run",
                self.run_id,
                exc,
            )
            self._abandon()
            with contextlib.suppress(pykka.ActorDeadError):
                self.stop()
        return None

    def _abandon(self) -> None:
        """Stop the run's work here without writing anything: another node holds its shard
        now, and its recovery decides the run's end (actors.system.recovery)."""
        self._cancel_io()
        for tool in self.tools.values():
            tool.cancel.set()
        if not self.ended:
            self.ended = True
            self.s.registry.run_dropped(self.run_id)

    def _receive(self, message: Any) -> None:
        if isinstance(message, BeginRun):
            self._begin()
            return
        if self.ended:
            if isinstance(message, CancelRun):
                reject(message.reply, RunNotActive(f"run {self.run_id} has already ended"))
            return
        if isinstance(message, ProviderItems):
            self._on_items(message)
        elif isinstance(message, ProviderFailed):
            if self._current(message.turn):
                self._stop_with("failed", message.reason, message.message)
        elif isinstance(message, FlushTick):
            self.flush_timer = None
            if self._current(message.turn):
                self._flush()
        elif isinstance(message, ToolAppended):
            self._on_tool_events(message)
        elif isinstance(message, CancelRun):
            self._on_cancel(message)
        elif isinstance(message, StallRun):
            self._on_stall(message)
        elif isinstance(message, WallClockExpired):
            if message.generation == self.clock_generation and self.ending is None:
                limit = self.state.wall_clock_s
                self._stop_with("failed", "wall_clock", f"the run exceeded {limit:g} s")
        elif isinstance(message, CancelGraceExpired) and self.ending is not None:
            self._write_ending()

    def on_failure(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        """Contain a crash: record it as the run's end and tell the session."""
        self._contain(f"{exc_type.__name__ if exc_type else 'error'}: {exc}")

    def _contain(self, detail: str) -> None:
        """Stop the run's work and record its ``failed`` end (``detail``: what stopped it)."""
        if self.ended:
            return
        self._cancel_io()
        for tool in self.tools.values():
            tool.cancel.set()
        self._end_despite_the_journal(detail)
        if not self.ended:
            self.ended = True
            self.s.registry.run_ended(self.run_id)

    def _end_despite_the_journal(self, detail: str) -> None:
        """Append the crashed run's ``failed`` end, waiting out a journal that is unavailable
        (a database restarting: retried with a backoff up to 1 s), so that the run ends and its
        session goes on once the journal is back. An append whose outcome was lost with the
        connection may have committed: on a conflict the run's tape is folded again, and a
        run found ended is only finished here. It gives up when the journal is closed or the
        node drains (the next start's recovery ends the run ``interrupted``), or at any other
        error."""
        delay = 0.05
        while True:
            try:
                if self.state.end is None:
                    self._append(end(self.state, "failed", "internal_error", detail))
                elif not self.ended:
                    self._finished()
                return
            except ConcurrencyConflict:
                try:
                    tape = recorded(self.s.journal.read_correlated(self.run_id))
                except Exception:
                    return
                self.state = fold(run_fold, tape) or self.state
            except JournalUnavailable:
                if self.s.draining:
                    return
                time.sleep(delay)
                delay = min(1.0, delay * 2)
            except Exception:
                return

    # --- folding ---------------------------------------------------------------------------

    def _append(self, *events: Event, principal: str | None = None) -> None:
        """Append, fold, and when the batch ends the run, finish the actor. ``principal``: who
        caused the events when it is not the run's principal (a canceller)."""
        check(self.state, events)
        last = events[-1]
        ending = isinstance(last, TERMINAL_EVENTS)
        if ending:
            self._cancel_io()
            self.coalescer.drop()  # a stopped turn's unflushed output is dropped, not recorded
            # Unrouted before the end is visible: whoever sees the terminal event and sends the
            # session its next message finds this run gone, not still live.
            self.s.registry.run_ended(self.run_id)
        for rec in self.out.append(self.state.next_seq, *events, principal=principal):
            self.state = apply(self.state, rec)
        if ending:
            if self.turn is not None:  # the run stopped in the middle of a model turn
                self._trace_turn(self.turn, None, error=getattr(last, "reason", "stopped"))
                self.turn = None
            self._finished()

    def _finished(self) -> None:
        self.ended = True
        state = self.state
        if self.tracer is not None:
            self.tracer.record(run_span(state, self.began_ns, time.time_ns()))
        answer = state.end.answer if isinstance(state.end, RunCompleted) else None
        self.s.turns.finished(self.run_id, state.text, answer)
        self._to_session(RunFinished(run_id=self.run_id, status=state.status.value))
        self.stop()

    def _on_tool_events(self, message: ToolAppended) -> None:
        for rec in message.records:
            self.state = apply(self.state, rec)
            if isinstance(rec.event, ToolCompleted):
                self.tools.pop(rec.event.invocation_id, None)
        self._announce_grants()
        if self.ending is not None:
            if not self.tools:
                self._write_ending()
            return
        self._advance()

    def _announce_grants(self) -> None:
        """Tell the session about calls a human allowed for the rest of the session."""
        for grant in self.state.session_grants:
            if grant.key not in self.grants:
                self.grants[grant.key] = grant
                self._to_session(GrantAdded(grant=grant))

    # --- steps -----------------------------------------------------------------------------

    def _begin(self) -> None:
        if self.cancelled_by is not None:
            self._append(
                end(self.state, "cancelled", "cancelled", self.cancelled_by),
                principal=self.cancelled_by,
            )
            return
        self._announce_grants()
        if self.state.status is RunStatus.IN_PROGRESS:  # resumed in a batch of read-only calls
            self._run_clock()
        self._advance()

    def _advance(self) -> None:
        """Do what the decider says until the run has to wait for something."""
        while not self.ended and self.ending is None:
            step = next_step(self.state, self.batching)
            if isinstance(step, Start):
                b = self.s.config.budgets
                start = started(
                    self.state,
                    max_turns=b.max_turns,
                    max_tool_calls=b.max_tool_calls,
                    wall_clock_s=b.wall_clock_s,
                    provider=self.s.provider.name,
                    model=self.s.config.provider_model,
                )
                if assembles_when_started(self.state):  # one commit for both
                    self._append(start, self._assembled(self.state))
                else:
                    self._append(start)
                self._run_clock()
            elif isinstance(step, MarkAwaiting):
                self._pause_clock()
                self._append(awaiting(self.state, step))
            elif isinstance(step, Resume):
                self._append(resumed(self.state, step))
                self._run_clock()
                if step.call is not None and step.invocation_id is not None:
                    self._ensure_tool(step.call, step.invocation_id, proceed=True)
            elif isinstance(step, AwaitTool | WaitApproval):
                self._ensure_tool(step.call, step.invocation_id)
                return
            elif isinstance(step, StartTool):
                self._ensure_tool(step.call, new_id())
                return
            elif isinstance(step, ParallelCalls):
                for call, invocation_id in step.running:
                    self._ensure_tool(call, invocation_id)
                if step.start is not None:
                    self._ensure_tool(step.start, new_id())
                return
            elif isinstance(step, Assemble):
                self._append(self._assembled(self.state))
            elif isinstance(step, CallModel):
                crossed = self._budget_crossed(step.turn)
                if crossed is not None:
                    self._append(end(self.state, "failed", BUDGET_EXCEEDED, crossed))
                    continue
                self._call_model(step.turn)
                return
            elif isinstance(step, Finish):
                self._append(step.end)
            elif isinstance(step, Stopping):
                self._stop_with("cancelled", "cancelled", step.requested_by)
            else:
                return

    # --- context ---------------------------------------------------------------------------

    def _assembled(self, state: RunState) -> Event:
        """What goes into the model input besides the message (``run.context_assembled``):
        the memory items that match it and the ``@memory`` / ``@run`` references (file and URL
        references were read by governed tool calls already)."""
        cfg = self.s.config
        start_ns = time.time_ns()
        reads = {
            r.index: self._read(r.kind, r.target)
            for r in state.references[:MAX_REFERENCES]
            if r.kind in ("memory", "run")
        }
        memory, searched = self._memory_hits()
        event = assembled(
            state,
            self.prior,
            memory=memory,
            reads=reads,
            learned=self._learned(),
            budget_tokens=cfg.context_budget_tokens,
            system_prompt=cfg.system_prompt,
        )
        if self.tracer is not None:
            spans = context_spans(
                state,
                event,
                span_id=new_span_id(),
                start_ns=start_ns,
                end_ns=time.time_ns(),
                searched=searched,
            )
            for span in spans:
                self.tracer.record(span)
        return event

    def _learned(self) -> tuple[dict[str, str], ...]:
        """Applied preferences of the run's principal and procedure hints for its request."""
        learning = self.s.learning
        if learning is None:
            return ()
        try:
            offered = learning.offered(self.state.principal, unescape(self.state.text))
        except Exception:  # a learning view that cannot answer offers nothing; the run goes on
            log.warning("learning view failed for run %s", self.run_id, exc_info=True)
            return ()
        return tuple(
            {"candidate_id": o.candidate_id, "kind": o.kind, "text": o.text} for o in offered
        )

    def _memory_hits(self) -> tuple[tuple[Injected, ...], Searched | None]:
        """The memory items injected into the run's context, and the search as its span
        tells it (None when there is no tracer or no search)."""
        memory, cfg = self.s.memory, self.s.config
        if memory is None or cfg.memory_inject_k <= 0:
            return (), None
        start_ns = time.time_ns()
        try:
            hits = memory.search(
                unescape(self.state.text),
                cfg.memory_inject_k,
                principal=self.state.principal,
                session_id=self.state.session_id,
            )
        except Exception:  # a memory view that cannot answer injects nothing; the run goes on
            log.warning("memory search failed for run %s", self.run_id, exc_info=True)
            return (), self._searched(start_ns, 0, 0, failed=True)
        chosen: list[Injected] = []
        for h in hits:
            by = injected_by(
                h.final, h.evidence, h.terms, cfg.memory_min_score, cfg.memory_min_evidence
            )
            if by is not None:
                chosen.append(
                    Injected(
                        item_id=h.item.item_id,
                        text=h.item.text,
                        lexical=h.lexical,
                        vector=h.vector,
                        recency=h.recency,
                        final=h.final,
                        by=by,
                    )
                )
        return tuple(chosen), self._searched(start_ns, len(hits), len(chosen))

    def _searched(
        self, start_ns: int, hits: int, injected: int, *, failed: bool = False
    ) -> Searched | None:
        if self.tracer is None:
            return None
        k = self.s.config.memory_inject_k
        return Searched(new_span_id(), start_ns, time.time_ns(), k, hits, injected, failed)

    def _read(self, kind: str, target: str) -> Read:
        """A ``@memory:ID`` or ``@run:ID`` reference, within what the run's principal may see:
        a memory item visible to it in this session, a run of this session or of this
        principal. Anything else reads as not found (no oracle for what exists)."""
        state = self.state
        if kind == "memory":
            memory = self.s.memory
            item = memory.get(target) if memory is not None else None
            if item is None or not item.visible_to(state.principal, state.session_id):
                return Read(outcome="not_found", note=f"no memory item {target} visible here")
            return Read(outcome="included", text=item.text)
        found = read_run(self.s.journal, target)
        if found is None or not (
            found.session_id == state.session_id or found.principal == state.principal
        ):
            return Read(outcome="not_found", note=f"no run {target} visible here")
        if found.answer is None:
            return Read(outcome="failed", note=f"run {target} has no answer ({found.state})")
        return Read(outcome="included", text=f"Q: {found.text}\nA: {found.answer}")

    # --- the provider ----------------------------------------------------------------------

    def _current(self, turn: int) -> bool:
        return self.turn is not None and self.turn.number == turn and self.ending is None

    def _budget_crossed(self, turn: int) -> str | None:
        """Why the run must end before turn ``turn``: a hard tokens or cost budget of its
        principal or session is reached (None: go on, or no budget applies). Not before the
        first turn: the run was checked when it was accepted (a queued run is caught before its
        second); before a later one the run's own use counts too (:meth:`BudgetGuard.crossed`)."""
        guard = self.s.budgets
        if guard is None or turn == 1:
            return None
        state = self.state
        now_ms = time.time_ns() // 1_000_000
        found = guard.crossed(
            state.principal,
            state.session_id,
            now_ms,
            run_tokens=state.prompt_tokens + state.completion_tokens,
        )
        return None if found is None else found.describe()

    def _call_model(self, turn: int) -> None:
        self.turn = _Turn(turn, time.time_ns())
        cfg = self.s.config
        messages = model_input(cfg.system_prompt, self.prior, self.state, cfg.tool_result_max_chars)
        request = ProviderRequest(messages=messages, tools=self.s.tool_definitions)
        self.provider_task = self.s.io.submit(self._pump(request, turn))

    async def _pump(self, request: ProviderRequest, turn: int) -> None:
        """On the I/O loop: forward the provider stream to this actor as messages, one for
        what the stream yields before the loop turns (a remote stream's items as they arrive,
        a stream that never waits in one message with its end), in the stream's order."""
        ref = self.actor_ref
        loop = asyncio.get_running_loop()
        batch: list[ProviderEvent] = []

        def flush() -> None:
            if batch:
                items = tuple(batch)
                batch.clear()
                _tell(ref, ProviderItems(turn, items))

        try:
            stream = self.s.provider.stream(request)
            async with contextlib.aclosing(stream):
                async for item in stream:
                    if not batch:
                        loop.call_soon(flush)
                    batch.append(item)
            items = tuple(batch)
            batch.clear()
            ref.tell(ProviderItems(turn, items, done=True))
        except asyncio.CancelledError:
            raise
        except pykka.ActorDeadError:
            return
        except ProviderUnavailable as exc:
            flush()
            _tell(ref, ProviderFailed(turn, exc.message, "provider_unavailable"))
        except ProviderError as exc:
            flush()
            _tell(ref, ProviderFailed(turn, exc.message))
        except Exception as exc:
            flush()
            _tell(ref, ProviderFailed(turn, f"{type(exc).__name__}: {exc}"))

    def _on_items(self, message: ProviderItems) -> None:
        for item in message.items:
            if not self._current(message.turn):  # an item's output may have stopped the run
                return
            self._on_item(item)
        if message.done and self._current(message.turn):
            self._on_turn_done()

    def _on_item(self, item: ProviderEvent) -> None:
        assert self.turn is not None
        if isinstance(item, TextDelta):
            self.turn.output_chars += len(item.text)
            # Redacted as one stream before it is chunked (actors/runs/coalesce.py): a secret split
            # across deltas is caught whole, and held text waits for its verdict.
            chunk = self.coalescer.add(item.text, time.monotonic())
            if chunk is not None:
                self._output(chunk)
            elif self.flush_timer is None and self.coalescer.pending:
                self._schedule_flush()
        elif isinstance(item, ToolCall):
            self.turn.calls.append(item)
        elif isinstance(item, Usage):
            self.turn.usage = item
        elif isinstance(item, TurnEnd):
            self.turn.finish = item.finish_reason

    def _output_event(self, turn: int, chunk: Chunk) -> RunOutput:
        return RunOutput(run_id=self.run_id, turn=turn, text=chunk.text, redacted=chunk.redacted)

    def _output(self, chunk: Chunk) -> None:
        assert self.turn is not None
        self._append(self._output_event(self.turn.number, chunk))

    def _flush(self) -> None:
        """Write what the coalescer lets go by age (the turn goes on)."""
        chunk = self.coalescer.tick(time.monotonic())
        if chunk is not None:
            self._output(chunk)
        if self.flush_timer is None and self.coalescer.pending:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        assert self.turn is not None
        ref, turn = self.actor_ref, self.turn.number
        self.flush_timer = self.s.io.call_later(
            self.coalescer.max_age_s, lambda: _tell(ref, FlushTick(turn))
        )

    def _on_turn_done(self) -> None:
        assert self.turn is not None
        self.provider_task = None
        # The redactor releases what it held: that last output and the turn's end (with the
        # run's, for a final answer, whose text ends with that output as stored) in one commit.
        chunk = self.coalescer.end_turn(time.monotonic())
        turn, self.turn = self.turn, None
        last = () if chunk is None else (redact_event(self._output_event(turn.number, chunk)),)
        closing = finish_turn(
            self.state,
            turn.number,
            turn.usage,
            tuple(turn.calls),
            turn.finish,
            last_output=last[0].text if last else "",
        )
        completed = closing[0]
        assert isinstance(completed, RunTurnCompleted)
        self._trace_turn(turn, completed)
        self._append(*last, *closing)
        self._advance()

    def _trace_turn(
        self, turn: _Turn, completed: RunTurnCompleted | None, error: str | None = None
    ) -> None:
        if self.tracer is None:
            return
        span = turn_span(
            self.state,
            turn.number,
            span_id=new_span_id(),
            provider=self.s.provider.name,
            start_ns=turn.started_ns,
            end_ns=time.time_ns(),
            completed=completed,
            output_chars=turn.output_chars,
            error=error,
        )
        self.tracer.record(span)

    # --- tools -----------------------------------------------------------------------------

    def _ensure_tool(self, call: ToolCall, invocation_id: str, *, proceed: bool = False) -> None:
        """Start the tool actor for ``call`` unless one is already working on it; with
        ``proceed``, let it act on its approval's decision. The actor records its result only
        after the call before it in the turn (if that one is still at work) recorded its own."""
        # By call: a call started moments ago has no invocation in the state until its
        # tool.proposed is folded, and a step asked meanwhile names it again with a new id.
        tool = next((t for t in self.tools.values() if t.call_id == call.id), None)
        if tool is not None:
            if proceed:
                _tell(tool.ref, Proceed())
            return
        before = None
        for other in self.state.open_calls():
            if other.id == call.id:
                break
            before = other.id
        after = next((t.done for t in self.tools.values() if t.call_id == before), None)
        cancel, done = threading.Event(), threading.Event()
        ref = ToolInvocationActor.start(
            self.s,
            invocation_id=invocation_id,
            run_id=self.run_id,
            session_id=self.state.session_id,
            principal=self.state.principal,
            channel=self.state.channel,
            call=call,
            run_ref=self.actor_ref,
            cancel=cancel,
            session_grants=tuple(self.grants.values()),
            posture_overrides=self.postures,
            state=self.resumed.pop(invocation_id, None),
            proceed=proceed,
            after=after,
            done=done,
        )
        self.tools[invocation_id] = _Tool(call.id, ref, cancel, done)

    # --- ending ----------------------------------------------------------------------------

    def _stop_with(self, kind: EndKind, reason: str, detail: str) -> None:
        """Stop everything in flight; write the end now, or once the tool has stopped."""
        self.ending = (kind, reason, detail)
        self._cancel_io()
        if self.tools:
            for tool in self.tools.values():
                tool.cancel.set()
                _tell(tool.ref, CancelTool(reason))
            ref = self.actor_ref
            self.s.io.call_later(
                self.s.config.cancel_grace_s, lambda: _tell(ref, CancelGraceExpired())
            )
            return
        self._write_ending()

    def _on_cancel(self, message: CancelRun) -> None:
        """Stop the run for ``message.principal``. With a call in flight the end waits for the
        call to stop, so the cancel is journaled (``run.cancel_requested``) before it is
        acknowledged: a crash in between fails the run, it never comes back."""
        if self.ending is None:
            if self.tools:
                try:
                    self._append(
                        cancel_requested(self.state, message.principal),
                        principal=message.principal,
                    )
                except Exception as exc:  # the caller hears it; on_failure contains the run
                    reject(message.reply, exc)
                    raise
            self._stop_with("cancelled", "cancelled", message.principal)
        resolve(message.reply, True)

    def _on_stall(self, message: StallRun) -> None:
        """The watchdog found no progress: stop like a cancel, end ``failed`` / ``stalled`` as
        the watchdog's act. A run already ending (cancelled, out of budget) ends as decided,
        and one waiting for a human meanwhile is not stalled."""
        if self.ending is None and self.state.status is RunStatus.IN_PROGRESS:
            self.stopped_by = message.principal
            self._stop_with("failed", "stalled", message.detail)
        resolve(message.reply, True)

    def _write_ending(self) -> None:
        assert self.ending is not None
        kind, _, detail = self.ending
        if not self.ended:
            # A cancel is recorded as the canceller's act, a stall as the watchdog's; any
            # other end as the run's own.
            by = detail if kind == "cancelled" else self.stopped_by
            self._append(end(self.state, *self.ending), principal=by)

    def _to_session(self, message: Any) -> None:
        directory = self.s.directory
        if directory is not None:
            _tell(directory, ToSession(self.state.session_id, message))

    # --- timers and I/O --------------------------------------------------------------------

    def _run_clock(self) -> None:
        """Start the wall-clock timer with what the run's budget has left (time in progress
        only: the fold counts it from the commit times of the run's state events)."""
        self._pause_clock()
        remaining = self.state.wall_clock_s - self.state.spent_s()
        ref, generation = self.actor_ref, self.clock_generation
        self.clock_timer = self.s.io.call_later(
            max(remaining, 0.0), lambda: _tell(ref, WallClockExpired(generation))
        )

    def _pause_clock(self) -> None:
        self.clock_generation += 1
        if self.clock_timer is not None:
            self.clock_timer.cancel()
            self.clock_timer = None

    def _cancel_io(self) -> None:
        if self.provider_task is not None:
            self.provider_task.cancel()
            self.provider_task = None
        if self.flush_timer is not None:
            self.flush_timer.cancel()
            self.flush_timer = None
        self._pause_clock()


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
