"""The schedules' one writer (:class:`ScheduleBook`) and the node's timer that fires them
(:class:`ScheduleDesk`).

:class:`ScheduleBook` holds the folded :class:`~actors.schedules.state.Schedules` and appends
what :mod:`actors.schedules.decide` decides, one change at a time under its lock: the API (on
a running node) and the offline CLI (on a stopped one, with the journal's writer lock) both go
through it.

:class:`ScheduleDesk` is a thread of its own that sleeps until the earliest due time (or a
change wakes it), asks :func:`~actors.schedules.decide.tick` what each schedule's due times
make, appends that, and asks the node for each fired run with the run id ``schedule.fired``
chose. The node's answer comes back on the session's thread and is queued to the desk's, which
records ``schedule.run_started`` (or ``schedule.run_not_started``): nothing outside the desk's
thread and the book's lock appends. At start the desk asks again for every run fired and never
answered (a crash between the two): the session that already has that run id answers with it
and starts nothing twice.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from actors.aggregate import fold
from actors.errors import NodeDraining
from actors.log_fields import fields
from actors.messages import RunTicket, StartRun
from actors.schedules import decide
from actors.schedules import state as schedule_state
from actors.schedules.info import FiredRun, ScheduleInfo
from actors.schedules.state import Schedule, Schedules, stream_of
from actors.stream import OwnedStream, Recorded, recorded
from events import JournalPort, JournalReadPort, new_id
from events.catalog import (
    SCHEDULE_KINDS,
    Event,
    ScheduleFired,
    ScheduleRunNotStarted,
    ScheduleRunStarted,
    ScheduleStopped,
)

log = logging.getLogger("reel.schedules")

NODE_PRINCIPAL = "node"
"""Whom a ``schedule.stopped`` names: the node noticed, nobody asked."""
CHANNEL = "schedule"
"""The channel a schedule's runs carry (``run.accepted``'s ``channel``)."""
MAX_SLEEP_S = 1.0
"""The longest the desk sleeps between looks: a run fired with ``overlap = "skip"`` is seen to
end, and a clock that jumps is noticed, within this."""


class ScheduleRefused(Exception):
    """Policy does not let the schedule's principal run in its session now (recorded as
    ``schedule.run_not_started``; never raised out of the desk)."""


def wall_ms() -> int:
    return int(time.time() * 1000)


def load_schedules(reader: JournalReadPort) -> Schedules:
    """Every schedule the journal names, folded."""
    return fold(schedule_state, recorded(reader.events_of_kinds(SCHEDULE_KINDS))) or Schedules()


class ScheduleBook:
    """The schedules of one journal and the one writer of their streams. Thread-safe."""

    def __init__(self, journal: JournalPort, state: Schedules, *, max_text_bytes: int) -> None:
        self._journal = journal
        self._state = state
        self.lock = threading.RLock()
        """Held while a change is decided and appended (the desk decides under it too)."""
        self.max_text_bytes = max_text_bytes
        self.changed: Callable[[], None] = lambda: None
        """Called after every change the API or the CLI made (the desk wakes up)."""
        self.reload: Callable[[], Schedules] | None = None
        """In a cluster, where other nodes change schedules too: the state read again from
        the journal, before every decision (``None``: this book is the only writer)."""

    @property
    def state(self) -> Schedules:
        return self._state

    def fresh(self) -> None:
        """Read the schedules again when others may have changed them (:attr:`reload`); call
        with :attr:`lock` held, before deciding."""
        if self.reload is not None:
            self._state = self.reload()

    def append(self, schedule_id: str, events: Sequence[Event], principal: str) -> list[Recorded]:
        """Append ``events`` to the schedule's stream at the seq its fold expects, and fold
        them."""
        with self.lock:
            old = self._state.by_id.get(schedule_id)
            stream = OwnedStream(
                self._journal,
                stream_of(schedule_id),
                principal=principal,
                correlation_id=None,
                causation_id=None,
            )
            records = stream.append(old.next_seq if old is not None else 0, *events)
            state = self._state
            for rec in records:
                state = schedule_state.apply(state, rec)
            self._state = state
            return records

    def create(
        self,
        *,
        by: str,
        name: str,
        cron: str | None,
        every: str | int | None,
        tz: str,
        session_key: str,
        text: str,
        runs_as: str,
        catch_up: str = "one",
        overlap: str = "skip",
        now_ms: int | None = None,
    ) -> ScheduleInfo:
        """Make a schedule (``by`` is whoever asked; it runs as ``runs_as``)."""
        with self.lock:
            self.fresh()
            event = decide.creation(
                self._state,
                schedule_id=new_id(),
                name=name,
                cron=cron,
                every=every,
                tz=tz,
                session_key=session_key,
                text=text,
                runs_as=runs_as,
                catch_up=catch_up,
                overlap=overlap,
                now_ms=wall_ms() if now_ms is None else now_ms,
                max_text_bytes=self.max_text_bytes,
            )
            self.append(event.schedule_id, [event], by)
            return self._changed(event.schedule_id)

    def pause(self, name: str, *, by: str) -> ScheduleInfo:
        with self.lock:
            self.fresh()
            event = decide.pausing(self._state, name)
            self.append(event.schedule_id, [event], by)
            return self._changed(event.schedule_id)

    def resume(self, name: str, *, by: str) -> ScheduleInfo:
        with self.lock:
            self.fresh()
            event = decide.resuming(self._state, name, wall_ms())
            self.append(event.schedule_id, [event], by)
            return self._changed(event.schedule_id)

    def delete(self, name: str, *, by: str) -> ScheduleInfo:
        with self.lock:
            self.fresh()
            event = decide.deletion(self._state, name)
            self.append(event.schedule_id, [event], by)
            return self._changed(event.schedule_id)

    def fire_now(self, name: str, *, by: str, now_ms: int) -> tuple[Schedule, str]:
        """Record ``run-now``'s ``schedule.fired``; the schedule and the run id it chose."""
        with self.lock:
            self.fresh()
            event = decide.run_now(self._state, name, run_id=new_id(), now_ms=now_ms)
            self.append(event.schedule_id, [event], by)
            return self._state.by_id[event.schedule_id], event.run_id

    def get(self, name: str) -> ScheduleInfo:
        """The schedule that exists under ``name`` (:class:`~actors.schedules.decide.
        UnknownSchedule` when none does)."""
        with self.lock:
            self.fresh()
            return info_of(decide.existing(self._state, name))

    def list(self) -> list[ScheduleInfo]:
        """Every schedule that exists, by name."""
        with self.lock:
            self.fresh()
            return [info_of(s) for s in self._state.live()]

    def _changed(self, schedule_id: str) -> ScheduleInfo:
        self.changed()
        return info_of(self._state.by_id[schedule_id])


def info_of(s: Schedule) -> ScheduleInfo:
    """What surfaces show of ``s``."""
    return ScheduleInfo(
        schedule_id=s.schedule_id,
        name=s.name,
        cron=s.cron,
        every_ms=s.every_ms,
        tz=s.tz,
        session_key=s.session_key,
        runs_as=s.runs_as,
        text=s.text,
        catch_up=s.catch_up,
        overlap=s.overlap,
        status=s.status,
        stopped=s.stopped,
        next_due_ms=decide.next_due(s),
        last_run_id=s.last_run_id,
        fired=s.fired,
        skipped=s.skipped,
        created_by=s.created_by,
        created_at_ms=s.created_at_ms,
    )


class ScheduleDesk:
    """Fires the book's schedules on a running node (see the module docstring).

    ``start_run`` hands a :class:`StartRun` to the node and returns its reply future;
    ``run_live(run_id)`` says whether a run is not over (live or queued in its session);
    ``principal_live(principal)`` whether the principal holds a live token (its roles);
    ``may_run(principal, session_key)`` why the principal may not run in that session now (the
    session's ``run.start`` for its owner, or ``session.create`` when there is none; None: it
    may): a run it may not start is recorded as not started, never asked for."""

    def __init__(
        self,
        book: ScheduleBook,
        *,
        start_run: Callable[[StartRun], Future[Any]],
        run_live: Callable[[str], bool],
        principal_live: Callable[[str], bool],
        may_run: Callable[[str, str], str | None] = lambda _principal, _key: None,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.book = book
        self._start_run = start_run
        self._run_live = run_live
        self._principal_live = principal_live
        self._may_run = may_run
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        self._answers: queue.SimpleQueue[tuple[Schedule, str, Future[Any]]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.boot_ms = 0
        """When this desk started: due times before it were missed (``catch_up``)."""
        book.changed = self._wake.set

    # --- life -----------------------------------------------------------------------------

    def start(self) -> None:
        """Ask again for every run fired and never answered, then start firing. Again after
        a :meth:`stop` too (a cluster node that holds the schedules' singleton again)."""
        self._stopping = False
        self._wake.clear()
        self.boot_ms = self._clock()
        with self.book.lock:
            self.book.fresh()
        for s in self.book.state.by_id.values():
            for run_id in s.pending:
                self._ask(s, run_id)
        self._thread = threading.Thread(target=self._loop, name="reel-schedules", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop firing (a fired run whose answer is not recorded is asked for at next start)."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    # --- the API --------------------------------------------------------------------------

    def run_now(self, name: str, *, by: str) -> FiredRun:
        """Fire ``name`` at once, as ``by`` asked (the run is the schedule's principal's)."""
        s, run_id = self.book.fire_now(name, by=by, now_ms=self._clock())
        self._ask(s, run_id)
        return FiredRun(name=s.name, schedule_id=s.schedule_id, run_id=run_id)

    def stopped(self) -> list[Schedule]:
        """The schedules the node stopped that still exist (the watchdog's incidents)."""
        return [s for s in self.book.state.live() if s.stopped]

    # --- the thread -----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                self._answered()
                self.look()
            except Exception:
                log.exception("schedule desk: a look failed; trying again shortly")
            self._wake.wait(self._sleep_s())

    def look(self) -> None:
        """Fire (or skip, or stop) every active schedule whose due time has come. Each is
        decided and appended under the book's lock, so a pause the API appends meanwhile is
        either before the decision (nothing fires) or after the fire."""
        now = self._clock()
        with self.book.lock:
            self.book.fresh()
        for schedule_id in list(self.book.state.by_id):
            with self.book.lock:
                s = self.book.state.by_id[schedule_id]
                last = s.last_run_id
                events = decide.tick(
                    s,
                    now_ms=now,
                    boot_ms=self.boot_ms,
                    previous_live=last is not None and (last in s.pending or self._run_live(last)),
                    principal_live=self._principal_live(s.runs_as),
                    new_id=new_id,
                )
                if not events:
                    continue
                stopped = any(isinstance(e, ScheduleStopped) for e in events)
                self.book.append(schedule_id, events, NODE_PRINCIPAL if stopped else s.runs_as)
                s = self.book.state.by_id[schedule_id]
            if stopped:
                log.warning(
                    "schedule stopped: its principal holds no live token",
                    extra=fields(schedule=s.name, principal=s.runs_as),
                )
            for event in events:
                if isinstance(event, ScheduleFired):
                    self._ask(s, event.run_id)

    def _sleep_s(self) -> float | None:
        """Until the earliest due time, at most :data:`MAX_SLEEP_S`; None (until a change or an
        answer wakes the desk) when no schedule is active."""
        now = self._clock()
        dues = [d for s in self.book.state.by_id.values() if (d := decide.next_due(s)) is not None]
        if not dues:
            return None
        return max(0.0, min(MAX_SLEEP_S, (min(dues) - now) / 1000))

    def _ask(self, s: Schedule, run_id: str) -> None:
        refused = self._may_run(s.runs_as, s.session_key)
        if refused is not None:
            done: Future[Any] = Future()
            done.set_exception(ScheduleRefused(refused))
            self._answer(s, run_id, done)
            return
        try:
            reply = self._start_run(
                StartRun(
                    text=s.text,
                    session_key=s.session_key,
                    create=True,
                    label=f"schedule {s.name}",
                    principal=s.runs_as,
                    channel=CHANNEL,
                    run_id=run_id,
                )
            )
        except RuntimeError:  # the node is not started (or stopped): asked again at next start
            return
        reply.add_done_callback(lambda done: self._answer(s, run_id, done))

    def _answer(self, s: Schedule, run_id: str, done: Future[Any]) -> None:
        self._answers.put((s, run_id, done))
        self._wake.set()

    def _answered(self) -> None:
        """Record the node's answers to fired runs (on the desk's thread)."""
        while True:
            try:
                s, run_id, done = self._answers.get_nowait()
            except queue.Empty:
                return
            error = done.exception()
            if isinstance(error, NodeDraining):
                continue  # asked for again at the next start
            if error is not None:
                log.warning(
                    "scheduled run refused by the node",
                    extra=fields(schedule=s.name, run_id=run_id, error=str(error)),
                )
                event: Event = ScheduleRunNotStarted(
                    schedule_id=s.schedule_id, run_id=run_id, error=str(error)
                )
            else:
                ticket: RunTicket = done.result()
                event = ScheduleRunStarted(
                    schedule_id=s.schedule_id, run_id=run_id, session_id=ticket.session_id
                )
            self.book.append(s.schedule_id, [event], s.runs_as)
