"""The schedules' state: every schedule, folded from ``schedule.*`` events (an
:class:`actors.aggregate.Aggregate` over every ``schedule/<schedule_id>`` stream).

A schedule's timing (``cron`` or ``every_ms``, ``tz``, ``anchor_ms``) never changes after it
is created; what changes is whether it is paused, deleted or stopped, how far its due times
have been dealt with (``handled_ms``: fired or skipped), and which runs it fired that the node
has not yet answered for (``pending``: fired, neither started nor refused).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from actors.stream import Recorded
from events.catalog import (
    CatchUp,
    Overlap,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
    ScheduleRunNotStarted,
    ScheduleRunStarted,
    ScheduleSkipped,
    ScheduleStopped,
    StopReason,
)

STREAM_PREFIX = "schedule/"


def stream_of(schedule_id: str) -> str:
    """The stream of one schedule: only the node's schedule desk (or an offline command
    through the same decider) appends to it."""
    return f"{STREAM_PREFIX}{schedule_id}"


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    """One schedule as the journal describes it."""

    schedule_id: str
    name: str
    cron: str
    every_ms: int
    tz: str
    anchor_ms: int
    session_key: str
    text: str
    runs_as: str
    catch_up: CatchUp
    overlap: Overlap
    created_by: str
    created_at_ms: int
    paused: bool = False
    deleted: bool = False
    stopped: StopReason | None = None
    stopped_at_ms: int = 0
    handled_ms: int = 0
    """Every due time up to here has fired or been skipped (the anchor at first)."""
    pending: tuple[str, ...] = ()
    """Runs fired and not yet started or refused, oldest first: asked for again at start."""
    last_run_id: str | None = None
    fired: int = 0
    skipped: int = 0
    next_seq: int = 0
    """The seq the next event of ``schedule/<schedule_id>`` takes."""

    @property
    def active(self) -> bool:
        """Whether due times fire (not paused, deleted or stopped)."""
        return not (self.paused or self.deleted or self.stopped)

    @property
    def status(self) -> str:
        """``active``, ``paused``, ``stopped`` or ``deleted``."""
        if self.deleted:
            return "deleted"
        if self.stopped:
            return "stopped"
        return "paused" if self.paused else "active"


class Schedules(msgspec.Struct, frozen=True):
    """Every schedule the journal names, deleted ones included, by id."""

    by_id: Mapping[str, Schedule] = msgspec.field(default_factory=dict)

    def live(self) -> list[Schedule]:
        """The schedules that exist (not deleted), by name."""
        return sorted((s for s in self.by_id.values() if not s.deleted), key=lambda s: s.name)

    def named(self, name: str) -> Schedule | None:
        """The schedule that exists under ``name``, if any."""
        return next((s for s in self.by_id.values() if s.name == name and not s.deleted), None)


def initial(first: Recorded) -> Schedules:
    """The schedules after ``first`` (every record starts the state, empty or not)."""
    return apply(Schedules(), first)


def apply(state: Schedules, rec: Recorded) -> Schedules:
    """``state`` after ``rec``; records of other kinds, of a schedule never created, or of a
    stream that is not the schedule's change nothing."""
    event = rec.event
    schedule_id = getattr(event, "schedule_id", None)
    if not isinstance(schedule_id, str) or rec.stream != stream_of(schedule_id):
        return state
    old = state.by_id.get(schedule_id)
    if isinstance(event, ScheduleCreated):
        if old is not None:
            return state
        new = Schedule(
            schedule_id=schedule_id,
            name=event.name,
            cron=event.cron,
            every_ms=event.every_ms,
            tz=event.tz,
            anchor_ms=event.anchor_ms,
            session_key=event.session_key,
            text=event.text,
            runs_as=event.runs_as,
            catch_up=event.catch_up,
            overlap=event.overlap,
            created_by=rec.principal,
            created_at_ms=rec.at_ms,
            handled_ms=event.anchor_ms,
            next_seq=1,
        )
        return Schedules({**state.by_id, schedule_id: new})
    if old is None:
        return state
    replace = msgspec.structs.replace
    s = replace(old, next_seq=old.next_seq + 1)
    if isinstance(event, SchedulePaused):
        s = replace(s, paused=True)
    elif isinstance(event, ScheduleResumed):
        s = replace(s, paused=False, handled_ms=max(s.handled_ms, event.after_ms))
    elif isinstance(event, ScheduleDeleted):
        s = replace(s, deleted=True)
    elif isinstance(event, ScheduleStopped):
        s = replace(
            s,
            stopped=event.reason,
            stopped_at_ms=rec.at_ms,
            handled_ms=max(s.handled_ms, event.due_ms),
        )
    elif isinstance(event, ScheduleFired):
        handled = s.handled_ms if event.trigger == "manual" else max(s.handled_ms, event.due_ms)
        s = replace(
            s,
            handled_ms=handled,
            pending=(*s.pending, event.run_id),
            last_run_id=event.run_id,
            fired=s.fired + 1,
        )
    elif isinstance(event, ScheduleSkipped):
        s = replace(s, handled_ms=max(s.handled_ms, event.due_ms), skipped=s.skipped + event.count)
    elif isinstance(event, ScheduleRunStarted | ScheduleRunNotStarted):
        s = replace(s, pending=tuple(r for r in s.pending if r != event.run_id))
    return Schedules({**state.by_id, schedule_id: s})
