"""What the schedule desk appends: pure functions of the schedules' state, raising a
:class:`ScheduleError` (nothing appended) for what the rules refuse. Ids and the clock come
in as arguments (the desk owns them).

The rules: a name is a :data:`events.catalog.SCHEDULE_NAME` unique among the schedules that
exist; exactly one of a cron line and an interval; a known time zone; a session key, a
principal and a text of at most the node's message limit; ``pause`` an active schedule,
``resume`` a paused one (a stopped one is deleted and made again), ``run-now`` and ``delete``
one that exists. :func:`tick` decides what a schedule's due times up to now make.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.schedules import times
from actors.schedules.state import Schedule, Schedules
from actors.schedules.times import InvalidSpec
from events.catalog import (
    CATCH_UPS,
    OVERLAPS,
    SCHEDULE_NAME,
    Event,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
    ScheduleSkipped,
    ScheduleStopped,
)
from events.fields import PRINCIPAL, SESSION_KEY, Identifier

CATCH_UP_ALL_MAX = 100
"""``catch_up = "all"`` fires at most this many missed due times (the latest); earlier ones are
recorded as skipped."""


class ScheduleError(Exception):
    """A schedule request the rules refuse; nothing was appended."""


class InvalidSchedule(ScheduleError, ValueError):
    """A malformed field; ``field`` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ScheduleExists(ScheduleError):
    """A schedule of that name exists."""


class UnknownSchedule(ScheduleError, LookupError):
    """No schedule of that name exists."""


class ScheduleConflict(ScheduleError):
    """The schedule is not in a state the request applies to (pausing a paused one, resuming a
    stopped one)."""


def _identifier(kind: Identifier, field: str, value: str) -> str:
    from events.redaction.redact import looks_secret  # the detectors cost a tenth of a second

    problem = kind.problem(value, looks_secret)
    if problem is not None:
        raise InvalidSchedule(field, problem)
    return value


def check_name(name: str) -> str:
    """``name`` if a schedule may have it."""
    return _identifier(SCHEDULE_NAME, "name", name)


def check_timing(cron: str | None, every: str | int | None, tz: str) -> tuple[str, int]:
    """``(cron, every_ms)`` with exactly one set, checked (``every`` as ``15m`` text or
    milliseconds)."""
    if (cron is None) == (every is None):
        raise InvalidSchedule("cron", "give exactly one of cron and every")
    try:
        times.zone(tz)
        if cron is not None:
            return times.check_cron(cron, tz), 0
        assert every is not None
        every_ms = times.parse_every(every) if isinstance(every, str) else times.check_every(every)
        return "", every_ms
    except InvalidSpec as exc:
        raise InvalidSchedule(exc.field, str(exc).partition(": ")[2]) from None


def creation(
    state: Schedules,
    *,
    schedule_id: str,
    name: str,
    cron: str | None,
    every: str | int | None,
    tz: str,
    session_key: str,
    text: str,
    runs_as: str,
    catch_up: str,
    overlap: str,
    now_ms: int,
    max_text_bytes: int,
) -> ScheduleCreated:
    """``schedule.created`` for a new schedule anchored at ``now_ms``."""
    check_name(name)
    line, every_ms = check_timing(cron, every, tz)
    _identifier(SESSION_KEY, "session_key", session_key)
    _identifier(PRINCIPAL, "runs_as", runs_as)
    size = len(text.encode("utf-8", "surrogatepass"))
    if not text.strip():
        raise InvalidSchedule("text", "must not be empty")
    if size > max_text_bytes:
        raise InvalidSchedule("text", f"is {size} bytes; at most {max_text_bytes} are accepted")
    if catch_up not in CATCH_UPS:
        raise InvalidSchedule("catch_up", f"must be one of {', '.join(CATCH_UPS)}")
    if overlap not in OVERLAPS:
        raise InvalidSchedule("overlap", f"must be one of {', '.join(OVERLAPS)}")
    if state.named(name) is not None:
        raise ScheduleExists(f"a schedule named {name!r} exists")
    return ScheduleCreated(
        schedule_id=schedule_id,
        name=name,
        cron=line,
        every_ms=every_ms,
        tz=tz,
        anchor_ms=now_ms,
        session_key=session_key,
        text=text,
        runs_as=runs_as,
        catch_up=catch_up,
        overlap=overlap,
    )


def existing(state: Schedules, name: str) -> Schedule:
    """The schedule that exists under ``name``."""
    check_name(name)
    found = state.named(name)
    if found is None:
        raise UnknownSchedule(f"no schedule named {name!r}")
    return found


def pausing(state: Schedules, name: str) -> SchedulePaused:
    """``schedule.paused`` of an active schedule."""
    s = existing(state, name)
    if not s.active:
        raise ScheduleConflict(f"schedule {name!r} is {s.status}, not active")
    return SchedulePaused(schedule_id=s.schedule_id)


def resuming(state: Schedules, name: str, now_ms: int) -> ScheduleResumed:
    """``schedule.resumed`` of a paused schedule: it fires from its next due time on."""
    s = existing(state, name)
    if s.stopped:
        raise ScheduleConflict(
            f"schedule {name!r} was stopped ({s.stopped}): delete it and create it again"
        )
    if not s.paused:
        raise ScheduleConflict(f"schedule {name!r} is not paused")
    return ScheduleResumed(schedule_id=s.schedule_id, after_ms=now_ms)


def deletion(state: Schedules, name: str) -> ScheduleDeleted:
    """``schedule.deleted`` of a schedule that exists."""
    return ScheduleDeleted(schedule_id=existing(state, name).schedule_id)


def run_now(state: Schedules, name: str, *, run_id: str, now_ms: int) -> ScheduleFired:
    """``schedule.fired`` at once (``manual``: its due times are not moved), paused or not; a
    stopped schedule fires nothing."""
    s = existing(state, name)
    if s.stopped:
        raise ScheduleConflict(f"schedule {name!r} was stopped ({s.stopped})")
    return ScheduleFired(schedule_id=s.schedule_id, run_id=run_id, due_ms=now_ms, trigger="manual")


def next_due(s: Schedule) -> int | None:
    """When ``s`` is next due (None: paused, deleted, stopped, or a cron line that matches
    nothing more)."""
    if not s.active:
        return None
    return times.next_due(
        cron=s.cron, every_ms=s.every_ms, tz=s.tz, anchor_ms=s.anchor_ms, after_ms=s.handled_ms
    )


def tick(
    s: Schedule,
    *,
    now_ms: int,
    boot_ms: int,
    previous_live: bool,
    principal_live: bool,
    new_id: Callable[[], str],
) -> list[Event]:
    """What ``s``'s due times up to ``now_ms`` make: nothing when none is due; a stop when its
    principal holds no live token; else the missed ones (due before ``boot_ms``, when this
    node's desk started) as ``catch_up`` says, then the rest, each fired unless ``overlap`` is
    ``skip`` and ``previous_live`` (the schedule's last run is not over): then skipped."""
    if not s.active:
        return []
    dues, count = times.dues_between(
        cron=s.cron,
        every_ms=s.every_ms,
        tz=s.tz,
        anchor_ms=s.anchor_ms,
        after_ms=s.handled_ms,
        until_ms=now_ms,
        limit=CATCH_UP_ALL_MAX + 1,
    )
    if count == 0:
        return []
    if not principal_live:
        return [
            ScheduleStopped(schedule_id=s.schedule_id, due_ms=dues[-1], reason="principal_revoked")
        ]
    on_time = [d for d in dues if d >= boot_ms]
    missed = dues[: len(dues) - len(on_time)]
    missed_count = count - len(on_time)
    kept = {"skip": [], "one": missed[-1:], "all": missed[-CATCH_UP_ALL_MAX:]}[s.catch_up]
    events: list[Event] = []
    if missed_count > len(kept):
        before = len(missed) - len(kept)  # the latest skipped is the one before the kept
        latest_skipped = missed[before - 1] if before > 0 else kept[0] - 1
        events.append(
            ScheduleSkipped(
                schedule_id=s.schedule_id,
                due_ms=latest_skipped,
                count=missed_count - len(kept),
                reason="catch_up",
            )
        )
    fires = [(d, "catch_up") for d in kept] + [(d, "due") for d in on_time]
    if not fires:
        return events
    if s.overlap == "skip" and previous_live:
        events.append(
            ScheduleSkipped(
                schedule_id=s.schedule_id, due_ms=fires[-1][0], count=len(fires), reason="overlap"
            )
        )
        return events
    for due, trigger in fires:
        events.append(
            ScheduleFired(
                schedule_id=s.schedule_id,
                run_id=new_id(),
                due_ms=due,
                trigger="catch_up" if trigger == "catch_up" else "due",
            )
        )
    return events
