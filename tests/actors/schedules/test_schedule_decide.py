"""What a schedule's due times make (actors/schedules/decide.py), folded by its own ``apply``:
each catch-up mode, overlap, a principal without a token, pause, run-now, and the refusals."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest

from actors.schedules import decide
from actors.schedules import state as schedule_state
from actors.schedules.decide import (
    InvalidSchedule,
    ScheduleConflict,
    ScheduleExists,
    UnknownSchedule,
)
from actors.schedules.state import Schedule, Schedules, stream_of
from actors.stream import Recorded
from events.catalog import Event, ScheduleFired, ScheduleSkipped, ScheduleStopped

ANCHOR = 1_000_000
EVERY = 2000


def ids() -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: f"run{next(counter)}"


def folded(state: Schedules, schedule_id: str, events: Sequence[Event], at_ms: int) -> Schedules:
    for event in events:
        state = schedule_state.apply(state, Recorded(event, stream_of(schedule_id), at_ms, "x"))
    return state


def made(catch_up: str = "one", overlap: str = "skip") -> tuple[Schedules, Schedule]:
    created = decide.creation(
        Schedules(),
        schedule_id="s1",
        name="tick",
        cron=None,
        every=EVERY,
        tz="UTC",
        session_key="k",
        text="hello",
        runs_as="user:alice",
        catch_up=catch_up,
        overlap=overlap,
        now_ms=ANCHOR,
        max_text_bytes=1000,
    )
    state = schedule_state.initial(Recorded(created, stream_of("s1"), ANCHOR, "admin"))
    return state, state.by_id["s1"]


def tick(
    s: Schedule, now: int, boot: int, *, live: bool = False, principal: bool = True
) -> list[Event]:
    return decide.tick(
        s, now_ms=now, boot_ms=boot, previous_live=live, principal_live=principal, new_id=ids()
    )


def test_nothing_is_due_before_the_first_interval() -> None:
    _, s = made()
    assert tick(s, ANCHOR + EVERY - 1, ANCHOR) == []


def test_a_due_time_on_a_running_node_fires_once_with_a_chosen_run_id() -> None:
    state, s = made()
    events = tick(s, ANCHOR + EVERY + 5, ANCHOR)
    assert events == [ScheduleFired(schedule_id="s1", run_id="run1", due_ms=ANCHOR + EVERY)]
    after = folded(state, "s1", events, ANCHOR + EVERY + 5).by_id["s1"]
    assert after.pending == ("run1",) and after.handled_ms == ANCHOR + EVERY
    assert tick(after, ANCHOR + EVERY + 10, ANCHOR) == []  # the same due time never fires twice


@pytest.mark.parametrize(
    ("mode", "fired", "skipped"),
    [
        ("skip", [], 3),
        ("one", [ANCHOR + 3 * EVERY], 2),
        ("all", [ANCHOR + d * EVERY for d in (1, 2, 3)], 0),
    ],
)
def test_due_times_missed_while_down_follow_catch_up(
    mode: str, fired: list[int], skipped: int
) -> None:
    _, s = made(catch_up=mode)
    boot = ANCHOR + 3 * EVERY + 500  # down across three due times
    events = tick(s, boot + 10, boot)
    fires = [e for e in events if isinstance(e, ScheduleFired)]
    skips = [e for e in events if isinstance(e, ScheduleSkipped)]
    assert [f.due_ms for f in fires] == fired
    assert all(f.trigger == "catch_up" for f in fires)
    assert sum(k.count for k in skips) == skipped
    assert all(k.reason == "catch_up" for k in skips)
    state = folded(made(catch_up=mode)[0], "s1", events, boot)
    assert state.by_id["s1"].handled_ms == ANCHOR + 3 * EVERY  # every missed one is dealt with


def test_catch_up_all_fires_at_most_its_cap_and_skips_the_older() -> None:
    _, s = made(catch_up="all")
    missed = decide.CATCH_UP_ALL_MAX + 7
    boot = ANCHOR + missed * EVERY + 1
    events = tick(s, boot, boot)
    fires = [e for e in events if isinstance(e, ScheduleFired)]
    (skip,) = [e for e in events if isinstance(e, ScheduleSkipped)]
    assert len(fires) == decide.CATCH_UP_ALL_MAX and skip.count == 7
    assert skip.due_ms < fires[0].due_ms  # skipped first, so the fold's handled time only grows


def test_a_due_time_after_the_start_is_not_a_missed_one() -> None:
    _, s = made(catch_up="skip")
    boot = ANCHOR + EVERY + 500  # one missed before start, one due after it
    events = tick(s, ANCHOR + 2 * EVERY + 1, boot)
    assert [type(e) for e in events] == [ScheduleSkipped, ScheduleFired]
    assert events[1] == ScheduleFired(schedule_id="s1", run_id="run1", due_ms=ANCHOR + 2 * EVERY)


@pytest.mark.parametrize(("overlap", "fires"), [("skip", 0), ("queue", 1)])
def test_a_live_previous_run_follows_overlap(overlap: str, fires: int) -> None:
    _, s = made(overlap=overlap)
    events = tick(s, ANCHOR + EVERY, ANCHOR, live=True)
    assert len([e for e in events if isinstance(e, ScheduleFired)]) == fires
    if overlap == "skip":
        assert events == [
            ScheduleSkipped(schedule_id="s1", due_ms=ANCHOR + EVERY, count=1, reason="overlap")
        ]


def test_a_principal_without_a_live_token_stops_the_schedule_and_nothing_fires() -> None:
    state, s = made()
    events = tick(s, ANCHOR + EVERY, ANCHOR, principal=False)
    assert events == [
        ScheduleStopped(schedule_id="s1", due_ms=ANCHOR + EVERY, reason="principal_revoked")
    ]
    stopped = folded(state, "s1", events, ANCHOR + EVERY).by_id["s1"]
    assert stopped.status == "stopped" and not stopped.active
    assert tick(stopped, ANCHOR + 10 * EVERY, ANCHOR) == []
    with pytest.raises(ScheduleConflict):
        decide.resuming(folded(state, "s1", events, 0), "tick", ANCHOR)
    with pytest.raises(ScheduleConflict):
        decide.run_now(folded(state, "s1", events, 0), "tick", run_id="r", now_ms=ANCHOR)


def test_a_paused_schedule_fires_nothing_and_resumes_without_catching_up_the_pause() -> None:
    state, _ = made()
    state = folded(state, "s1", [decide.pausing(state, "tick")], ANCHOR + 1)
    assert tick(state.by_id["s1"], ANCHOR + 100 * EVERY, ANCHOR) == []
    resumed_at = ANCHOR + 50 * EVERY + 1
    state = folded(state, "s1", [decide.resuming(state, "tick", resumed_at)], resumed_at)
    events = tick(state.by_id["s1"], ANCHOR + 51 * EVERY, ANCHOR)
    assert [e.due_ms for e in events if isinstance(e, ScheduleFired)] == [ANCHOR + 51 * EVERY]


def test_run_now_fires_a_paused_schedule_without_moving_its_due_times() -> None:
    state, _ = made()
    state = folded(state, "s1", [decide.pausing(state, "tick")], ANCHOR + 1)
    fired = decide.run_now(state, "tick", run_id="r9", now_ms=ANCHOR + 5 * EVERY)
    assert fired.trigger == "manual"
    after = folded(state, "s1", [fired], ANCHOR + 5 * EVERY).by_id["s1"]
    assert after.handled_ms == ANCHOR and after.pending == ("r9",)


def test_names_are_unique_among_live_schedules_and_free_again_after_delete() -> None:
    state, _ = made()
    with pytest.raises(ScheduleExists):
        decide.creation(
            state,
            schedule_id="s2",
            name="tick",
            cron="0 9 * * *",
            every=None,
            tz="UTC",
            session_key="k",
            text="x",
            runs_as="admin",
            catch_up="one",
            overlap="skip",
            now_ms=ANCHOR,
            max_text_bytes=100,
        )
    state = folded(state, "s1", [decide.deletion(state, "tick")], ANCHOR)
    with pytest.raises(UnknownSchedule):
        decide.pausing(state, "tick")
    assert state.named("tick") is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "0 9 * * *", "every": "15m"}, "cron"),
        ({"cron": None, "every": None}, "cron"),
        ({"cron": "0 25 * * *", "every": None}, "cron"),
        ({"cron": "0 9 * * *", "every": None, "tz": "Europe/Nowhere"}, "tz"),
        ({"cron": None, "every": "0s"}, "every"),
        ({"cron": None, "every": 0}, "every"),
        ({"cron": None, "every": "1m", "name": "9bad name"}, "name"),
        ({"cron": None, "every": "1m", "text": "  "}, "text"),
        ({"cron": None, "every": "1m", "text": "x" * 101}, "text"),
        ({"cron": None, "every": "1m", "runs_as": "has space"}, "runs_as"),
        ({"cron": None, "every": "1m", "session_key": ""}, "session_key"),
        ({"cron": None, "every": "1m", "catch_up": "some"}, "catch_up"),
        ({"cron": None, "every": "1m", "overlap": "both"}, "overlap"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(fields: dict[str, object], field: str) -> None:
    values: dict[str, object] = {
        "schedule_id": "s1",
        "name": "ok",
        "tz": "UTC",
        "session_key": "k",
        "text": "hello",
        "runs_as": "admin",
        "catch_up": "one",
        "overlap": "skip",
        "now_ms": ANCHOR,
        "max_text_bytes": 100,
        **fields,
    }
    with pytest.raises(InvalidSchedule) as caught:
        decide.creation(Schedules(), **values)  # type: ignore[arg-type]
    assert caught.value.field == field
