"""The task dispatcher and its pool of workers (pykka actors), and the heartbeat thread.

* :class:`TaskDispatcher` knows every unfinished task: it folds them from the journal when it
  starts (one scan), then hears of each new one from :meth:`actors.tasks.queue.TaskQueue.enqueue`
  and of each attempt's end from its workers. It asks :func:`actors.tasks.decide.next_action`
  what is due, hands due tasks to idle workers (in due order), appends ``task.expired`` and the
  final ``task.failed`` of a lapsed last attempt itself, and sets one timer (on the node's I/O
  loop) for the next due time, expiry or lease end.
* :class:`TaskWorker` claims the task it is handed (an append at the seq its fold expects: of
  two claimers one wins, the other finds nothing due), runs the handler on its own thread,
  and appends the outcome the same way, then tells the dispatcher it is free.
* The heartbeat thread renews the lease of every attempt running in this process every
  ``heartbeat_s``; a heartbeat that finds the claim gone (cancelled, or reclaimed after a
  lapse) sets the handler's flag.

All appends to one task from this process (claim, heartbeats, outcome, a cancel) hold that
task's lock, so they never race each other; a race with another process (none today: one
process holds a journal) would be settled by the journal's concurrency check all the same.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import msgspec
import pykka

from actors.actor_threads import PooledActor
from actors.io_loop import IoLoop, Timer
from actors.tasks.decide import (
    Claim,
    Done,
    UnknownTask,
    Wait,
    cancelled,
    claimed,
    failed,
    heartbeat,
    holds,
    next_action,
    settled,
    succeeded,
)
from actors.tasks.handlers import (
    HandlerRegistry,
    PermanentFailure,
    TaskContext,
    TaskInterrupted,
    unknown_kind,
)
from actors.tasks.state import TaskState
from actors.tasks.store import load_open_tasks, load_task, now_ms, write
from events import AppendRejected, JournalError, JournalPort, JournalUnavailable
from events.errors import UNAVAILABLE_RETRY_S
from events.task_lifecycle import TaskStatus

log = logging.getLogger("reel.tasks")

NODE = "node"
"""The principal of what the queue appends by itself (claims, heartbeats, outcomes, expiry)."""


class PoolSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What the dispatcher and the workers run under (from ``[tasks]``)."""

    workers: int
    heartbeat_s: float
    lease_s: float

    @property
    def lease_ms(self) -> int:
        return round(self.lease_s * 1000)


class Running:
    """One task handed to a worker of this process: its latest folded state, the handler's
    context once claimed, and the lock every append of this process to the task holds."""

    def __init__(self, state: TaskState, worker: str) -> None:
        self.state = state
        self.worker = worker
        self.attempt = 0
        self.context: TaskContext | None = None
        self.lock = threading.Lock()
        self.renewed = time.monotonic()
        self.pending: str | None = None
        """An interruption that arrived before the claim (applied to the context on claim)."""

    @property
    def task_id(self) -> str:
        return self.state.task_id

    def interrupt(self, why: Any) -> None:
        """Set the handler's flag (or remember it for when the context exists)."""
        context = self.context
        if context is not None:
            context.interrupt(why)
        elif self.pending is None:
            self.pending = why


class Shared:
    """What the dispatcher, the workers and the heartbeat thread share."""

    def __init__(
        self,
        journal: JournalPort,
        registry: HandlerRegistry,
        settings: PoolSettings,
        node_id: str,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.journal = journal
        self.registry = registry
        self.settings = settings
        self.node_id = node_id
        """This process's incarnation: workers are ``<node_id>.<n>``."""
        self.clock = clock
        self.running: dict[str, Running] = {}
        self.guard = threading.Lock()
        """Guards :attr:`running` and the worker pool below (the dispatcher and any thread
        enqueuing take workers from it)."""
        self.workers: list[pykka.ActorRef[Any] | None] = []
        """By index; None until the dispatcher first hands an attempt to it."""
        self.idle: list[int] = []
        """Indexes of the workers with no attempt."""
        self.draining = False
        self.unplaced = 0
        """Enqueued tasks told to the dispatcher and not yet looked at by it, plus the due
        tasks it holds for want of a worker: an enqueue takes no worker they need
        (:meth:`take`)."""

    def running_now(self) -> list[Running]:
        with self.guard:
            return list(self.running.values())

    def take(self, state: TaskState) -> tuple[Running, pykka.ActorRef[Any]] | None:
        """An idle started worker for ``state``, a task being enqueued and due now, with its
        entry in :attr:`running` (its lock held: release it once the claim is folded in).
        None when the pool drains, or when the idle workers are not more than the tasks the
        dispatcher has yet to place (:attr:`unplaced`): a task taken here never makes one
        known before it wait for a worker (with one worker, tasks run in enqueue order)."""
        with self.guard:
            if self.draining or len(self.idle) <= self.unplaced:
                return None
            for position in range(len(self.idle) - 1, -1, -1):
                index = self.idle[position]
                ref = self.workers[index]
                if ref is not None:
                    del self.idle[position]
                    entry = Running(state, f"{self.node_id}.{index}")
                    entry.lock.acquire()
                    self.running[state.task_id] = entry
                    return entry, ref
        return None

    def free(self, entry: Running, index: int) -> bool:
        """Make worker ``index`` idle after ``entry``'s attempt ended the task, which the
        dispatcher never knew of (taken by :meth:`take`), without a word to the dispatcher;
        False, doing nothing, when tasks it holds wait for a worker: tell it then."""
        with self.guard:
            if self.unplaced:
                return False
            self.running.pop(entry.task_id, None)
            self.idle.append(index)
            return True

    def give_back(self, entry: Running) -> None:
        """Undo :meth:`take` for an entry that was not claimed (its lock held)."""
        index = int(entry.worker.rsplit(".", 1)[1])
        with self.guard:
            self.running.pop(entry.task_id, None)
            self.idle.append(index)
        entry.lock.release()


# --- messages --------------------------------------------------------------------------------


class Known(msgspec.Struct, frozen=True):
    """Queue -> dispatcher: a task was enqueued (or changed outside the pool)."""

    state: TaskState
    counted: bool = False
    """Counted in :attr:`Shared.unplaced` (an enqueue's)."""


class RunTask(msgspec.Struct, frozen=True):
    """Dispatcher -> worker: claim and run this task (queue -> worker: run this task, its
    claim by this worker committed with its enqueue: ``claimed``)."""

    entry: Any  # Running
    claimed: bool = False


class Finished(msgspec.Struct, frozen=True):
    """Worker -> dispatcher: the worker is free; the task as it left it."""

    worker: int
    state: TaskState


class Wake(msgspec.Struct, frozen=True):
    """Timer -> dispatcher: something may be due."""


class CancelTask(msgspec.Struct, frozen=True, kw_only=True):
    """Queue -> dispatcher: cancel ``task_id`` (answers the state after ``task.cancelled``)."""

    task_id: str
    by: str
    reason: str
    reply: Future[Any]


class Drain(msgspec.Struct, frozen=True):
    """Queue -> dispatcher: start no more attempts (the node is stopping)."""


class Ready(msgspec.Struct, frozen=True):
    """Queue -> dispatcher (asked once, at start): answered after ``on_start`` has folded the
    unfinished tasks and started every worker, so the node's start returns with the pool up."""


# --- the dispatcher --------------------------------------------------------------------------


class TaskDispatcher(PooledActor):
    """Finds due tasks and hands them to idle workers; see the module docstring."""

    def __init__(
        self,
        shared: Shared,
        io: IoLoop,
        heartbeats: Heartbeats,
        open_tasks: dict[str, TaskState] | None = None,
    ) -> None:
        """``open_tasks``: the unfinished tasks when the caller has just folded them (None:
        folded here). Workers and ``heartbeats`` start with the first attempt handed out: a
        node that runs no task keeps no thread for them."""
        super().__init__()
        self.shared = shared
        self.io = io
        self.heartbeats = heartbeats
        self.open_tasks = open_tasks
        self.tasks: dict[str, TaskState] = {}
        self.generation: dict[str, int] = {}
        self.waiting: list[tuple[int, int, str]] = []
        """Heap of (when to look again, generation, task id)."""
        self.ready: deque[tuple[int, str]] = deque()
        """(generation, task id) of due tasks waiting for a worker, in due order."""
        self.timer: Timer | None = None
        self.timer_at: int | None = None
        self.draining = False
        self.counter = 0
        self.held = 0
        """``len(ready)`` as last counted in :attr:`Shared.unplaced`."""
        self.placing = 0
        """Enqueues' ``Known`` taken since then (counted in :attr:`Shared.unplaced` until a
        pass has placed them: handed to a worker, held in ``ready``, or waiting)."""

    # --- pykka hooks ---------------------------------------------------------------------

    def on_start(self) -> None:
        count = self.shared.settings.workers
        with self.shared.guard:
            self.shared.workers = [None] * count
            self.shared.idle = list(reversed(range(count)))
        open_tasks, self.open_tasks = self.open_tasks, None
        if open_tasks is None:
            open_tasks = load_open_tasks(self.shared.journal)
        for state in open_tasks.values():
            self._track(state)
        self._dispatch()

    def on_stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        for ref in self.shared.workers:
            if ref is not None:
                with contextlib.suppress(pykka.ActorDeadError):
                    ref.stop(block=False)

    def _worker(self, index: int) -> pykka.ActorRef[Any]:
        """Worker ``index``, started on first use (and the heartbeats with the first one)."""
        ref = self.shared.workers[index]
        if ref is None:
            self.heartbeats.start()
            ref = TaskWorker.start(index, self.shared, self.actor_ref)
            with self.shared.guard:
                self.shared.workers[index] = ref
        return ref

    def on_receive(self, message: Any) -> Any:
        try:
            return self._receive(message)
        except JournalUnavailable as exc:  # a database restarting: look again soon, not die
            log.warning("the task dispatcher waits for the journal: %s", exc)
            reply = getattr(message, "reply", None)
            if isinstance(reply, Future) and not reply.done():
                reply.set_exception(exc)
            ref = self.actor_ref
            self.io.call_later(UNAVAILABLE_RETRY_S, lambda: _wake(ref))
            return None

    def _receive(self, message: Any) -> Any:
        if isinstance(message, Known):
            self.placing += message.counted  # uncounted with the pass below, atomically
            self._track(message.state)
        elif isinstance(message, Finished):
            with self.shared.guard:
                self.shared.running.pop(message.state.task_id, None)
                self.shared.idle.append(message.worker)
            self._track(message.state)
        elif isinstance(message, Wake):
            self.timer_at = None
        elif isinstance(message, CancelTask):
            self._cancel(message)
        elif isinstance(message, Drain):
            self.draining = True
            with self.shared.guard:
                self.shared.draining = True
        elif isinstance(message, Ready):
            return True
        self._dispatch()
        return None

    # --- tracking --------------------------------------------------------------------------

    def _track(self, state: TaskState) -> None:
        """Know ``state`` (a newer fold replaces an older one; an ended task is forgotten)."""
        task_id = state.task_id
        known = self.tasks.get(task_id)
        if known is not None and known.next_seq > state.next_seq:
            return
        if state.status.terminal:
            self.tasks.pop(task_id, None)
            self.generation.pop(task_id, None)
            return
        self.tasks[task_id] = state
        self.counter += 1
        self.generation[task_id] = self.counter
        heapq.heappush(self.waiting, (0, self.counter, task_id))

    def _current(self, generation: int, task_id: str) -> TaskState | None:
        """The task an entry names, unless the entry is stale or the task is in a worker."""
        if self.generation.get(task_id) != generation:
            return None
        with self.shared.guard:
            if task_id in self.shared.running:
                return None
        return self.tasks.get(task_id)

    # --- dispatching -----------------------------------------------------------------------

    def _dispatch(self) -> None:
        clock = self.shared.clock
        now = clock()
        while self.waiting and self.waiting[0][0] <= now:
            _, generation, task_id = heapq.heappop(self.waiting)
            state = self._current(generation, task_id)
            if state is None:
                continue
            action = next_action(state, now)
            if isinstance(action, Claim):
                self.ready.append((generation, task_id))
            elif isinstance(action, Wait):
                heapq.heappush(self.waiting, (action.until_ms, generation, task_id))
            elif isinstance(action, Done):
                self._track(state)
            else:  # Expire, GiveUp: nothing runs; the dispatcher records why
                self._settle(state)
        shared = self.shared
        while self.ready and not self.draining:
            generation, task_id = self.ready.popleft()
            state = self._current(generation, task_id)
            if state is None:
                continue
            if not isinstance(next_action(state, clock()), Claim):
                self._track(state)  # looked at again on the next pass
                continue
            with shared.guard:
                if not shared.idle:  # an enqueue took the last one meanwhile
                    self.ready.appendleft((generation, task_id))
                    self._count()  # under the same hold: a worker freed later tells us
                    break
                index = shared.idle.pop()
                entry = Running(state, f"{shared.node_id}.{index}")
                shared.running[task_id] = entry
            self._worker(index).tell(RunTask(entry))
        with shared.guard:
            self._count()
        if self.waiting and self.waiting[0][0] <= clock():
            self.actor_ref.tell(Wake())  # settled or re-tracked tasks to look at now
        else:
            self._arm()

    def _count(self) -> None:
        """Bring :attr:`Shared.unplaced` up to date with ``ready`` and the enqueues' ``Known``
        taken since the last count (hold the guard)."""
        self.shared.unplaced += len(self.ready) - self.held - self.placing
        self.held, self.placing = len(self.ready), 0

    def _settle(self, state: TaskState) -> None:
        try:
            after = write(
                self.shared.journal,
                state,
                lambda s: settled(s, self.shared.clock()),
                principal=NODE,
            )
        except JournalError as exc:
            log.warning("task %s: cannot record its end: %s", state.task_id, exc)
            return
        self._track(after)

    def _arm(self) -> None:
        """One timer, for the earliest time something waits for."""
        if not self.waiting:
            return
        at = self.waiting[0][0]
        if self.timer_at is not None and self.timer_at <= at:
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = at
        ref = self.actor_ref
        delay = max(at - self.shared.clock(), 0) / 1000

        def wake() -> None:
            with contextlib.suppress(pykka.ActorDeadError):
                ref.tell(Wake())

        self.timer = self.io.call_later(delay + 0.001, wake)

    # --- cancelling ------------------------------------------------------------------------

    def _cancel(self, message: CancelTask) -> None:
        try:
            after = cancel_task(
                self.shared, message.task_id, message.by, message.reason, self.tasks
            )
        except BaseException as exc:
            if not message.reply.done():
                message.reply.set_exception(exc)
            return
        with self.shared.guard:
            in_worker = message.task_id in self.shared.running
        if not in_worker:
            self._track(after)
        if not message.reply.done():
            message.reply.set_result(after)


def cancel_task(
    shared: Shared, task_id: str, by: str, reason: str, known: dict[str, TaskState]
) -> TaskState:
    """Append ``task.cancelled`` (by ``by``) and set the flag of the attempt running in this
    process, if any. :class:`UnknownTask` for an id no task has; ``TaskNotActive`` for a task
    that already ended."""
    with shared.guard:
        entry = shared.running.get(task_id)
    if entry is not None:
        with entry.lock:
            entry.state = write(
                shared.journal, entry.state, lambda s: cancelled(s, by, reason), principal=by
            )
            entry.interrupt("cancelled")
            return entry.state
    state = known.get(task_id) or load_task(shared.journal, task_id)
    if state is None:
        raise UnknownTask(f"no task with id {task_id!r}")
    return write(shared.journal, state, lambda s: cancelled(s, by, reason), principal=by)


# --- the workers -----------------------------------------------------------------------------


class TaskWorker(PooledActor):
    """Claims and runs one task at a time on its own thread; see the module docstring."""

    def __init__(self, index: int, shared: Shared, dispatcher: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self.index = index
        self.shared = shared
        self.dispatcher = dispatcher

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, RunTask):
            entry: Running = message.entry
            try:
                self._attempt(entry, message.claimed)
            except Exception as exc:  # journal closed while stopping, or a bug: never lose a worker
                log.warning("task %s: attempt stopped: %s", entry.task_id, exc)
            quiet = message.claimed and entry.state.status.terminal
            if not (quiet and self.shared.free(entry, self.index)):
                with contextlib.suppress(pykka.ActorDeadError):
                    self.dispatcher.tell(Finished(self.index, entry.state))
        return None

    def _attempt(self, entry: Running, claimed_already: bool) -> None:
        shared = self.shared
        journal, clock, me = shared.journal, shared.clock, entry.worker
        lease_ms = shared.settings.lease_ms
        with entry.lock:
            if not claimed_already:
                entry.state = write(
                    journal,
                    entry.state,
                    lambda s: claimed(s, clock(), me, lease_ms),
                    principal=NODE,
                )
            state = entry.state
            attempt = state.attempt
            if not holds(state, me, attempt):
                return  # not due after all (cancelled, expired, claimed elsewhere)
            entry.attempt = attempt
            entry.renewed = time.monotonic()
            spec = shared.registry.get(state.kind)
            if spec is None:
                why = unknown_kind(state.kind, shared.registry.kinds())
                entry.state = write(
                    journal,
                    state,
                    lambda s: failed(
                        s, me, attempt, why, clock(), error_kind="unknown_kind", retryable=False
                    ),
                    principal=NODE,
                )
                return
            context = TaskContext(
                task_id=state.task_id,
                kind=state.kind,
                attempt=attempt,
                max_attempts=state.max_attempts,
                principal=state.principal,
                timeout_s=spec.timeout_s,
            )
            entry.context = context
            if entry.pending is not None:
                context.interrupt(entry.pending)  # type: ignore[arg-type]
        started = time.monotonic()
        outcome: Callable[[TaskState], Any]
        try:
            result = spec.handler(state.payload, context)
        except TaskInterrupted as exc:
            if exc.why != "timeout":
                return  # cancelled or lost (already recorded), or stopping (left to lapse)
            why = f"the attempt ran past its deadline of {spec.timeout_s} s"
            outcome = _failure(me, attempt, why, clock, "timeout", True, started)
        except PermanentFailure as exc:
            outcome = _failure(me, attempt, _describe(exc), clock, "error", False, started)
        except Exception as exc:
            outcome = _failure(me, attempt, _describe(exc), clock, "error", True, started)
        else:
            duration = _elapsed_ms(started)
            try:
                msgspec.json.encode(result)
            except (TypeError, ValueError, OverflowError) as exc:
                why = f"the handler's result is not JSON: {exc}"
                outcome = _failure(me, attempt, why, clock, "invalid_result", False, started)
            else:
                outcome = lambda s: succeeded(s, me, attempt, result, duration)  # noqa: E731
        with entry.lock:
            try:
                entry.state = write(journal, entry.state, outcome, principal=NODE)
            except AppendRejected as exc:  # a result over the journal's size limit
                why = f"the handler's result cannot be stored: {exc}"
                entry.state = write(
                    journal,
                    entry.state,
                    _failure(me, attempt, why, clock, "invalid_result", False, started),
                    principal=NODE,
                )


def _failure(
    me: str,
    attempt: int,
    error: str,
    clock: Callable[[], int],
    kind: Any,
    retryable: bool,
    started: float,
) -> Callable[[TaskState], Any]:
    duration = _elapsed_ms(started)
    return lambda s: failed(
        s, me, attempt, error, clock(), error_kind=kind, retryable=retryable, duration_ms=duration
    )


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _elapsed_ms(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


# --- heartbeats ------------------------------------------------------------------------------


class Heartbeats:
    """A thread renewing the lease of every attempt running in this process."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-heartbeats", daemon=True)
        self._started = False

    def start(self) -> None:
        """Start the thread unless it was started (or stopped) before; idempotent, for the
        dispatcher's thread only."""
        if not self._started and not self._stop.is_set():
            self._started = True
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        every = self.shared.settings.heartbeat_s
        while not self._stop.wait(every / 4):
            for entry in self.shared.running_now():
                if entry.context is None or time.monotonic() - entry.renewed < every:
                    continue
                try:
                    self._renew(entry)
                except JournalError as exc:
                    log.warning("task %s: heartbeat not recorded: %s", entry.task_id, exc)

    def _renew(self, entry: Running) -> None:
        shared = self.shared
        lease_ms = shared.settings.lease_ms
        with entry.lock:
            if entry.state.status is not TaskStatus.RUNNING or entry.context is None:
                return
            entry.state = write(
                shared.journal,
                entry.state,
                lambda s: heartbeat(s, entry.worker, entry.attempt, shared.clock(), lease_ms),
                principal=NODE,
            )
            entry.renewed = time.monotonic()
            if not holds(entry.state, entry.worker, entry.attempt):
                lost = entry.state.status is not TaskStatus.CANCELLED
                entry.interrupt("lost" if lost else "cancelled")


def _wake(ref: pykka.ActorRef[Any]) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(Wake())
