"""The durable background task queue: what node code uses to enqueue work and register
handlers (docs/tasks.md).

::

    queue = node.tasks                    # also services.tasks, for actors
    queue.register("post_run_reflection", reflect, timeout_s=60)   # before node.start()
    ticket = queue.enqueue("post_run_reflection", {"run_id": run_id},
                           dedupe_key=f"reflection:{run_id}", expires_in_s=3600)
    queue.cancel(ticket.task_id, by="user:alice", reason="not needed")

A task is a stream ``task/<id>`` of events (``task.enqueued`` -> ``task.claimed`` ->
``task.heartbeat``... -> ``task.succeeded | task.failed | task.expired | task.cancelled``); its
state is their fold (:mod:`actors.tasks.state`), what is due is decided by pure functions
(:mod:`actors.tasks.decide`), and a dispatcher with a pool of ``[tasks] workers`` worker actors
runs them (:mod:`actors.tasks.workers`). Handlers and what they may assume:
:mod:`actors.tasks.handlers`.

Exceptions (through :meth:`TaskQueue.enqueue` and :meth:`TaskQueue.cancel`)::

    InvalidCommand     bad enqueue input; .field names it (kind, payload, max_attempts, ...)
    UnknownTask        (NotFound) no task has that id
    TaskNotActive      (Conflict) the task already ended
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Annotated, Any

import msgspec
import pykka

from actors.io_loop import IoLoop
from actors.stream import Recorded
from actors.tasks import state as task_state
from actors.tasks.decide import Claim, TaskNotActive, UnknownTask, claimed, next_action
from actors.tasks.handlers import (
    Handler,
    HandlerRegistry,
    HandlerSpec,
    PermanentFailure,
    TaskContext,
    TaskInterrupted,
    noop,
)
from actors.tasks.state import TaskState, apply
from actors.tasks.store import (
    TaskTicket,
    append_enqueued,
    enqueued,
    enqueued_event,
    idempotency_key,
    load_open_tasks,
    load_task,
    now_ms,
)
from actors.tasks.workers import (
    NODE,
    CancelTask,
    Drain,
    Heartbeats,
    Known,
    PoolSettings,
    Ready,
    Running,
    RunTask,
    Shared,
    TaskDispatcher,
    Wake,
    cancel_task,
)
from events import AppendResult, ConcurrencyConflict, JournalError, JournalPort, new_id
from events.catalog import TaskEnqueued
from events.task_lifecycle import task_stream
from projections.tasks import TaskRecord

__all__ = [
    "Handler",
    "HandlerSpec",
    "PermanentFailure",
    "TaskContext",
    "TaskInterrupted",
    "TaskNotActive",
    "TaskQueue",
    "TaskState",
    "TaskTicket",
    "TasksConfig",
    "UnknownTask",
    "record_of",
]

Positive = Annotated[float, msgspec.Meta(gt=0)]


class TasksConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[tasks]``: the worker pool, leases and the defaults of every enqueue."""

    workers: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    """Worker actors: how many tasks run at once."""
    heartbeat_s: Positive = 2.0
    """How often a running attempt renews its lease (``task.heartbeat``)."""
    lease_s: Positive = 10.0
    """How long a claim holds without a heartbeat; after that the task is reclaimed (after a
    crash, the restarted node waits this long). At least twice ``heartbeat_s``."""
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    """Attempts of a task whose enqueuer does not say."""
    backoff_base_s: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    """The wait after a first failed attempt; it doubles after each further one."""
    backoff_max_s: Annotated[float, msgspec.Meta(ge=0)] = 300.0
    """The longest wait between attempts."""

    def __post_init__(self) -> None:
        if self.lease_s < 2 * self.heartbeat_s:
            raise ValueError(
                f"lease_s ({self.lease_s}) must be at least twice heartbeat_s "
                f"({self.heartbeat_s}), or a live attempt's lease could lapse between heartbeats"
            )


class TaskQueue:
    """The node's task queue. Not an actor: node code and transports call it from any thread
    (``cancel`` blocks until the cancel is recorded: never call it from an actor's handler)."""

    def __init__(
        self,
        journal: JournalPort,
        io: IoLoop,
        config: TasksConfig | None = None,
        *,
        clock: Callable[[], int] = now_ms,
    ):
        """``clock``: now in epoch ms, by which every due time, expiry and lease is set and
        decided: the node's wall clock alone; in a cluster the database's
        (:meth:`events.postgres.leases.LeaseKeeper.database_ms`), so a node whose clock is
        ahead reclaims no other node's claim early."""
        self.journal = journal
        self.io = io
        self.config = config or TasksConfig()
        self.registry = HandlerRegistry()
        self.registry.register("noop", noop, description="does nothing (sleep_s: waits first)")
        settings = PoolSettings(
            workers=self.config.workers,
            heartbeat_s=self.config.heartbeat_s,
            lease_s=self.config.lease_s,
        )
        self.node_id = new_id()
        """This process's incarnation (workers are ``<node_id>.<n>``)."""
        self._shared = Shared(journal, self.registry, settings, self.node_id, clock)
        self._dispatcher: pykka.ActorRef[Any] | None = None
        self._heartbeats: Heartbeats | None = None
        self._deferred = False
        """Started with no unfinished task: the dispatcher starts with the first enqueue."""
        self._starting = threading.Lock()

    # --- handlers --------------------------------------------------------------------------

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        timeout_s: float | None = None,
        description: str = "",
        replace: bool = False,
    ) -> HandlerSpec:
        """Run ``handler(payload, context)`` for tasks of ``kind``. Register before the node
        starts; a task whose kind has no handler fails ``unknown_kind`` when it is taken."""
        return self.registry.register(
            kind, handler, timeout_s=timeout_s, description=description, replace=replace
        )

    # --- enqueue and cancel ----------------------------------------------------------------

    def enqueue(
        self,
        kind: str,
        payload: Any = None,
        *,
        principal: str = "node",
        delay_s: float = 0.0,
        not_before_ms: int | None = None,
        expires_in_s: float | None = None,
        expires_at_ms: int | None = None,
        max_attempts: int | None = None,
        dedupe_key: str | None = None,
        causation_id: str | None = None,
    ) -> TaskTicket:
        """Record a task (durable when this returns) and wake the dispatcher. ``principal`` is
        who asked for it; ``causation_id`` what caused it (a run id, say). A ``dedupe_key``
        already used returns that task's ticket with ``duplicate=True`` and enqueues nothing.
        Bad input raises :class:`actors.InvalidCommand` naming the field."""
        shared = self._shared
        event = enqueued_event(
            kind,
            payload,
            delay_s=delay_s,
            not_before_ms=not_before_ms,
            expires_in_s=expires_in_s,
            expires_at_ms=expires_at_ms,
            max_attempts=self.config.max_attempts if max_attempts is None else max_attempts,
            backoff_base_s=self.config.backoff_base_s,
            backoff_max_s=self.config.backoff_max_s,
            dedupe_key=dedupe_key,
            clock=shared.clock,
        )
        if self._dispatcher is not None:
            now = shared.clock()
            # What the task would be once enqueued now: to decide the claim, never kept (the
            # worker's state is the fold of what the journal stores).
            would_be = task_state.start(event, principal, now)
            taken = None
            if isinstance(next_action(would_be, now), Claim):
                taken = shared.take(would_be)
            if taken is not None:
                return self._enqueue_claimed(event, principal, causation_id, now, *taken)
        ticket, state = append_enqueued(self.journal, event, principal, causation_id)
        if state is not None:
            self._tell_dispatcher(state)
        return ticket

    def _tell_dispatcher(self, state: TaskState) -> None:
        """Hand a durable task to the dispatcher. One that stopped meanwhile (the node is
        stopping: :meth:`stop` passes through a moment where it is dead but still named) is
        not an error: the task is in the journal, and the next start folds it."""
        dispatcher = self._dispatcher or self._start_dispatcher(None, lazily=True)
        if dispatcher is not None:
            with self._shared.guard:
                self._shared.unplaced += 1
            try:
                dispatcher.tell(Known(state, counted=True))
            except pykka.ActorDeadError:
                with self._shared.guard:
                    self._shared.unplaced -= 1

    def _enqueue_claimed(
        self,
        event: TaskEnqueued,
        principal: str,
        causation_id: str | None,
        now: int,
        entry: Running,
        worker: pykka.ActorRef[Any],
    ) -> TaskTicket:
        """Enqueue ``event`` and its claim by ``entry``'s idle worker (taken by
        :meth:`Shared.take`) as two appends submitted together, so the journal commits them in
        one transaction as a rule (in two when its writer takes the first alone: the same
        outcome); the worker is told to run the task once both are committed. When the claim
        is not committed (a duplicate ``dedupe_key``: the stream is not this task's), the
        worker is given back and the task goes to the dispatcher as any enqueue does."""
        shared = self._shared
        stream = task_stream(event.task_id)
        try:
            first = self.journal.submit(
                stream,
                [event],
                expected_seq=0,
                principal=principal,
                causation_id=causation_id,
                idempotency_key=idempotency_key(event.dedupe_key),
            )
        except BaseException:
            self._give_back(entry)
            raise
        second: Future[AppendResult] | None = None
        claim = claimed(entry.state, now, entry.worker, shared.settings.lease_ms)
        if claim is not None:
            # Never committed before the enqueue: it expects the stream to hold it already.
            with contextlib.suppress(JournalError):
                second = self.journal.submit(stream, [claim], expected_seq=1, principal=NODE)
        try:
            result = first.result()
        except BaseException:
            self._give_back(entry)
            raise
        ticket, state = enqueued(event, result, principal)
        try:
            if second is None or state is None:
                raise ConcurrencyConflict(stream, 1, 0)  # not claimed (a duplicate's stream)
            won = second.result()
        except JournalError:
            self._give_back(entry)
            if state is not None:
                self._tell_dispatcher(state)
            return ticket
        entry.state = apply(state, Recorded(won.events[0], stream, won.recorded_at_ms, NODE))
        entry.lock.release()
        try:
            worker.tell(RunTask(entry, claimed=True))
        except pykka.ActorDeadError:  # the node stopped meanwhile: the claim lapses, is reclaimed
            with shared.guard:
                shared.running.pop(entry.task_id, None)
        return ticket

    def _give_back(self, entry: Running) -> None:
        """The worker :meth:`_enqueue_claimed` took is idle again; the dispatcher looks at
        its due tasks (one may wait for it)."""
        self._shared.give_back(entry)
        dispatcher = self._dispatcher
        if dispatcher is not None:
            with contextlib.suppress(pykka.ActorDeadError):
                dispatcher.tell(Wake())

    def cancel(
        self, task_id: str, *, by: str, reason: str = "", timeout: float = 30.0
    ) -> TaskState:
        """Record ``task.cancelled`` by ``by`` and set the running handler's cancel flag;
        returns the task after it. :class:`UnknownTask`, :class:`TaskNotActive`."""
        dispatcher = self._dispatcher
        if dispatcher is not None:
            reply: Future[Any] = Future()
            try:
                dispatcher.tell(CancelTask(task_id=task_id, by=by, reason=reason, reply=reply))
            except pykka.ActorDeadError:  # it stopped meanwhile: no attempt runs here any more
                pass
            else:
                state: TaskState = reply.result(timeout)
                return state
        return cancel_task(self._shared, task_id, by, reason, {})

    def adopt(self, tasks: dict[str, TaskState]) -> None:
        """Take on unfinished tasks another node left (a cluster node acquired their shards):
        each is run, or reclaimed once its claim's lease lapses, by the same rules as at a
        start. Starts the dispatcher if it is not running (unless the queue drained)."""
        if not tasks:
            return
        dispatcher = self._dispatcher or self._start_dispatcher(None, lazily=True)
        if dispatcher is None:
            return
        for state in tasks.values():
            dispatcher.tell(Known(state))
        dispatcher.tell(Wake())

    def reclaim(self, task_id: str, reason: str = "") -> None:
        """Look at ``task_id`` now (the watchdog's nudge): when its claim's lease has lapsed it
        is reclaimed at once, by the same rule as always. A live lease is never broken: its
        holder's heartbeats show it still runs. ``reason`` is for the caller's own record."""
        del reason
        dispatcher = self._dispatcher
        state = load_task(self.journal, task_id)
        if dispatcher is not None and state is not None:
            dispatcher.tell(Known(state))
            dispatcher.tell(Wake())

    def get(self, task_id: str) -> TaskState | None:
        """The task folded from the journal (None: no such task)."""
        return load_task(self.journal, task_id)

    def running(self) -> int:
        """How many attempts run in this process now."""
        return len(self._shared.running_now())

    # --- life ------------------------------------------------------------------------------

    def start(self, open_tasks: dict[str, TaskState] | None = None) -> None:
        """Start the dispatcher when a task is unfinished (it folds them all; returns once it
        runs), else with the first enqueue; its workers and the heartbeat thread start with
        the first attempt. So a node that runs no task has no thread for them. Blocks: call it
        from the composition, never from an actor. ``open_tasks``: what
        :func:`~actors.tasks.store.load_open_tasks` read, when the caller read it already (and
        nothing could enqueue since); else it is read here."""
        if self._dispatcher is not None or self._deferred:
            return
        if open_tasks is None:
            open_tasks = load_open_tasks(self.journal)
        if not open_tasks:
            self._deferred = True
            return
        dispatcher = self._start_dispatcher(open_tasks, lazily=False)
        assert dispatcher is not None
        dispatcher.ask(Ready(), timeout=60)

    def _start_dispatcher(
        self, open_tasks: dict[str, TaskState] | None, *, lazily: bool
    ) -> pykka.ActorRef[Any] | None:
        """The dispatcher, started once: by the composition, or ``lazily`` by the first
        enqueue (in whatever thread made it; it never waits for the dispatcher), unless the
        queue drained since. None when it is not running and must not start."""
        with self._starting:
            if self._dispatcher is None and (self._deferred or not lazily):
                self._deferred = False
                self._heartbeats = Heartbeats(self._shared)
                self._dispatcher = TaskDispatcher.start(
                    self._shared, self.io, self._heartbeats, open_tasks
                )
            return self._dispatcher

    def drain(self) -> None:
        """Start no more attempts; running ones go on. Returns once the dispatcher has taken
        the drain, after everything it was told before (an enqueue's ``Known``): from then on
        :meth:`running` counts every attempt that will ever start here, so a caller waiting
        for it to reach 0 cannot miss one handed out a moment later. Blocks, like
        :meth:`start`."""
        with self._starting:
            self._deferred = False  # an enqueue from now on is left for the next start
            dispatcher = self._dispatcher
        if dispatcher is not None:
            with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
                dispatcher.ask(Drain(), timeout=10)

    def stop(self, grace_s: float = 5.0) -> None:
        """Drain, give running attempts ``grace_s`` to end, then set their flags (``stopping``:
        a handler that stops records nothing, and its claim lapses and is reclaimed on the
        next start) and stop the actors. Idempotent."""
        self.drain()
        dispatcher = self._dispatcher
        if dispatcher is None:
            return
        deadline = time.monotonic() + grace_s
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)
        for entry in self._shared.running_now():
            entry.interrupt("stopping")
        deadline = time.monotonic() + 2.0
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._heartbeats is not None:
            self._heartbeats.stop()
        with contextlib.suppress(pykka.ActorDeadError, pykka.Timeout):
            dispatcher.stop(block=True, timeout=5)
        self._dispatcher = None


def record_of(state: TaskState) -> TaskRecord:
    """The tasks view's row for a folded task (the view folds the same events to the same
    values; offline commands show the fold)."""
    return TaskRecord(
        task_id=state.task_id,
        kind=state.kind,
        state=str(state.status),
        principal=state.principal,
        payload=state.payload,
        dedupe_key=state.dedupe_key,
        enqueued_at_ms=state.enqueued_at_ms,
        not_before_ms=state.not_before_ms,
        expires_at_ms=state.expires_at_ms,
        max_attempts=state.max_attempts,
        attempts=state.attempt,
        worker=state.worker,
        claimed_at_ms=state.claimed_at_ms,
        lease_until_ms=state.lease_until_ms,
        heartbeat_at_ms=state.heartbeat_at_ms,
        reclaims=state.reclaims,
        retry_at_ms=state.retry_at_ms,
        error=state.error,
        error_kind=state.error_kind,
        result=state.result,
        ended_at_ms=state.ended_at_ms,
        cancelled_by=state.cancelled_by,
        cancel_reason=state.cancel_reason,
    )
