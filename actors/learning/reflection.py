"""The reflection feed: every completed run gets a ``post_run_reflection`` task.

A node-level subscriber, not a step of the run: the run actor's path is unchanged, so a
reflection can neither fail nor slow a run. The feed follows the journal's commits (its
listener only wakes the actor; the actor reads the new ``run.completed`` rows by position, an
index range).

**Batches.** With ``batch_s`` > 0 (the rules), the first commit after a quiet spell opens a
window; when it closes the feed reads the runs completed since its last look, once, and
enqueues them as one task (``{"run_ids": [...]}``, at most
:data:`~actors.learning.desk.BATCH_MAX_RUNS` a task): a task's own events then cost a few appends
per batch instead of per run, and a busy journal costs the feed one query per window rather
than one per commit. With 0 (a model reflects: its answer costs far more than the task) every
completed run gets a task of its own, at once.

**Exactly once.** A task's dedupe key is ``reflection:<its first run id>``; the queue turns a
second enqueue with the same key into the first task. When it starts, the feed looks back
:data:`CATCH_UP_EVENTS` positions: runs that completed there and are in no reflection task's
payload (the node stopped or crashed in between) get one now; runs that are, never again.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka

from actors.actor_threads import PooledActor
from actors.io_loop import IoLoop, Timer
from actors.learning.desk import BATCH_MAX_RUNS, TASK_KIND
from actors.tasks.queue import TaskQueue
from events import JournalError, JournalPort, JournalUnavailable, StoredEvent
from events.catalog import RunCompleted, TaskEnqueued, kinds_of
from events.errors import UNAVAILABLE_RETRY_S

log = logging.getLogger("reel.learning")

CATCH_UP_EVENTS = 20_000
"""How far back (in journal positions) a starting feed looks for completed runs that were
never reflected on."""
EXPIRES_S = 24 * 3600.0
"""A reflection not started within a day is dropped (``task.expired``): it would teach from a
stale run, and a backlog must not grow without bound."""


def dedupe_key(run_ids: list[str]) -> str:
    return f"reflection:{run_ids[0]}"


def runs_of(payload: Any) -> list[str]:
    """The runs a reflection task's payload covers."""
    if not isinstance(payload, dict):
        return []
    one, many = payload.get("run_id"), payload.get("run_ids")
    if isinstance(one, str):
        return [one]
    return [r for r in many if isinstance(r, str)] if isinstance(many, list) else []


class _Wake:
    """The journal committed something: look for completed runs."""


class _Flush:
    """The batch window closed: enqueue what it gathered."""


class _CatchUp:
    """Start: enqueue what a stop or crash left without a reflection."""


class ReflectionFeed(PooledActor):
    """Enqueues reflections of completed runs (see the module docstring)."""

    def __init__(
        self,
        journal: JournalPort,
        tasks: TaskQueue,
        io: IoLoop,
        *,
        batch_s: float = 0.0,
        max_attempts: int = 3,
        mine: Callable[[StoredEvent], bool] | None = None,
    ) -> None:
        """``mine``: in a cluster, whether a ``run.completed`` is this node's to reflect on
        (its session's shard is served here); every node reads every node's runs."""
        super().__init__()
        self.mine = mine
        self.journal = journal
        self.tasks = tasks
        self.io = io
        self.batch_s = batch_s
        self.max_attempts = max_attempts
        self.seen = 0
        """Every ``run.completed`` at or below this position is enqueued or gathered."""
        self.gathered: list[str] = []
        """Completed runs waiting for the batch window to close."""
        self._timer: Timer | None = None
        self._pending = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.enqueued = 0
        """Reflection tasks this feed enqueued (duplicates not counted)."""

    def on_start(self) -> None:
        ref = self.actor_ref

        def wake(_head: int) -> None:  # on the journal's thread: never block it
            if not self._pending.is_set():
                self._pending.set()
                ref.tell(_Wake())

        self._unsubscribe = self.journal.listen(wake)
        ref.tell(_CatchUp())

    def on_stop(self) -> None:
        """Stop following, after enqueueing every run completed so far: a node that stops
        right after a run (``reel chat --local``) still has its reflection queued."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._timer is not None:
            self._timer.cancel()
        try:
            self._scan()
            self._flush()
        except JournalError as exc:  # closing, or away: the next start catches up (_CatchUp)
            log.warning("the reflection feed could not enqueue a last time: %r", exc)
        except Exception:
            log.warning("the reflection feed could not enqueue a last time", exc_info=True)

    def on_receive(self, message: Any) -> Any:
        try:
            self._receive(message)
        except JournalUnavailable as exc:  # a database restarting: the same step again soon
            log.warning("the reflection feed waits for the journal: %s", exc)
            ref = self.actor_ref
            self.io.call_later(UNAVAILABLE_RETRY_S, lambda: _tell(ref, message))
        return None

    def _receive(self, message: _CatchUp | _Wake | _Flush) -> None:
        if isinstance(message, _CatchUp):
            self._catch_up()
        elif isinstance(message, _Wake):
            if self.batch_s <= 0:
                self._pending.clear()
                self._scan()
            elif self._timer is None:
                # The window opens; until it closes the listener stays quiet (the flag stays
                # set) and the feed reads the journal once, when it does.
                ref = self.actor_ref
                self._timer = self.io.call_later(self.batch_s, lambda: _tell(ref, _Flush()))
        elif isinstance(message, _Flush):
            self._timer = None
            self._pending.clear()  # before the scan: a commit after it opens the next window
            self._scan()
            self._flush()

    def _catch_up(self) -> None:
        """Enqueue the runs of the last :data:`CATCH_UP_EVENTS` positions that have none."""
        head = self.journal.committed_position
        start = max(head - CATCH_UP_EVENTS, 0)
        done: set[str] = set()
        enqueued = kinds_of(TaskEnqueued)
        for stored in self.journal.events_of_kinds(enqueued, after_position=start):
            event = stored.decode()
            if isinstance(event, TaskEnqueued) and event.task_kind == TASK_KIND:
                done.update(runs_of(event.payload))
        self.seen = start
        self._scan(skip=done)
        self._flush()

    def _scan(self, skip: set[str] | None = None) -> None:
        head = self.journal.committed_position
        completed = kinds_of(RunCompleted)
        for stored in self.journal.events_of_kinds(completed, after_position=self.seen):
            run_id = stored.correlation_id
            if (
                run_id is not None
                and (skip is None or run_id not in skip)
                and (self.mine is None or self.mine(stored))
            ):
                self.gathered.append(run_id)
            self.seen = max(self.seen, stored.position)
        self.seen = max(self.seen, head)
        if self.batch_s <= 0:
            for run_id in self.gathered:
                self._enqueue([run_id])
            self.gathered = []

    def _flush(self) -> None:
        while self.gathered:  # each batch let go once enqueued: a retry sends the rest
            batch = self.gathered[:BATCH_MAX_RUNS]
            self._enqueue(batch)
            del self.gathered[: len(batch)]

    def _enqueue(self, run_ids: list[str]) -> None:
        payload: dict[str, Any] = (
            {"run_id": run_ids[0]} if len(run_ids) == 1 else {"run_ids": run_ids}
        )
        try:
            ticket = self.tasks.enqueue(
                TASK_KIND,
                payload,
                principal="node",
                dedupe_key=dedupe_key(run_ids),
                causation_id=run_ids[-1],
                max_attempts=self.max_attempts,
                expires_in_s=EXPIRES_S,
            )
        except JournalUnavailable:
            raise  # retried by on_receive once the journal is back (duplicates are deduped)
        except JournalError as exc:  # the journal is closing, or refused it: no run is affected
            log.warning("could not enqueue the reflection of runs %s: %r", run_ids, exc)
            return
        except Exception:  # a defect: its traceback is the report
            log.warning("could not enqueue the reflection of runs %s", run_ids, exc_info=True)
            return
        if not ticket.duplicate:
            self.enqueued += 1


def _tell(ref: pykka.ActorRef[Any], message: Any) -> None:
    with contextlib.suppress(pykka.ActorDeadError):
        ref.tell(message)
