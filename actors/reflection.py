"""The reflection feed: one ``post_run_reflection`` task for every completed run.

A node-level subscriber, not a step of the run: the run actor's path is unchanged, so a
reflection can neither fail nor slow a run. The feed follows the journal's commits (its
listener only wakes the actor; the actor reads the new ``run.completed`` rows by position, an
index range) and enqueues each run's reflection with the dedupe key ``reflection:<run_id>``:
the queue turns a second enqueue of the same run into the first task, so a restart, a crash
between the run's end and its enqueue, or two scans of one row never reflect twice.

When it starts, the feed looks back :data:`CATCH_UP_EVENTS` positions: runs that completed
there without a reflection task (the node stopped or crashed in between) get one now.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pykka

from actors.learning import TASK_KIND
from actors.tasks import TaskQueue
from events import JournalPort
from events.catalog import TaskEnqueued

log = logging.getLogger("reel.learning")

CATCH_UP_EVENTS = 20_000
"""How far back (in journal positions) a starting feed looks for completed runs that were
never reflected on."""
EXPIRES_S = 24 * 3600.0
"""A reflection not started within a day is dropped (``task.expired``): it would teach from a
stale run, and a backlog must not grow without bound."""


def dedupe_key(run_id: str) -> str:
    return f"reflection:{run_id}"


class _Wake:
    """The journal committed something: look for completed runs."""


class ReflectionFeed(pykka.ThreadingActor):
    """Enqueues a reflection per completed run (see the module docstring)."""

    use_daemon_thread = True

    def __init__(self, journal: JournalPort, tasks: TaskQueue, *, max_attempts: int = 3) -> None:
        super().__init__()
        self.journal = journal
        self.tasks = tasks
        self.max_attempts = max_attempts
        self.seen = 0
        """Every ``run.completed`` at or below this position has been enqueued."""
        self._pending = threading.Event()
        self._unsubscribe: Callable[[], None] | None = None
        self.enqueued = 0
        """Reflections this feed enqueued (duplicates not counted)."""

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
        try:
            self._scan()
        except Exception:
            log.warning(
                "the reflection feed could not look at the journal a last time", exc_info=True
            )

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, _CatchUp):
            self._catch_up()
        elif isinstance(message, _Wake):
            self._pending.clear()
            self._scan()
        return None

    def _catch_up(self) -> None:
        """Enqueue the runs of the last :data:`CATCH_UP_EVENTS` positions that have none."""
        head = self.journal.committed_position
        start = max(head - CATCH_UP_EVENTS, 0)
        done: set[str] = set()
        for stored in self.journal.events_of_kinds(("task.enqueued",), after_position=start):
            event = stored.decode()
            if (
                isinstance(event, TaskEnqueued)
                and event.task_kind == TASK_KIND
                and isinstance(event.payload, dict)
            ):
                done.add(str(event.payload.get("run_id")))
        self.seen = start
        self._scan(skip=done)

    def _scan(self, skip: set[str] | None = None) -> None:
        head = self.journal.committed_position
        for stored in self.journal.events_of_kinds(("run.completed",), after_position=self.seen):
            run_id = stored.correlation_id
            if run_id is not None and (skip is None or run_id not in skip):
                self._enqueue(run_id)
            self.seen = max(self.seen, stored.position)
        self.seen = max(self.seen, head)

    def _enqueue(self, run_id: str) -> None:
        try:
            ticket = self.tasks.enqueue(
                TASK_KIND,
                {"run_id": run_id},
                principal="node",
                dedupe_key=dedupe_key(run_id),
                causation_id=run_id,
                max_attempts=self.max_attempts,
                expires_in_s=EXPIRES_S,
            )
        except Exception:  # the journal is closing, or refused it: the run is not affected
            log.warning("could not enqueue the reflection of run %s", run_id, exc_info=True)
            return
        if not ticket.duplicate:
            self.enqueued += 1


class _CatchUp:
    """Start: enqueue what a stop or crash left without a reflection."""
