"""When a schedule is due (actors/schedules/times.py): cron lines in a time zone across both
daylight-saving changes, intervals, and the refusals of malformed timing."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from actors.schedules import times
from actors.schedules.times import InvalidSpec

BERLIN = ZoneInfo("Europe/Berlin")


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def local(due_ms: int) -> str:
    return datetime.fromtimestamp(due_ms / 1000, BERLIN).isoformat()


def dailies(start: datetime, count: int) -> list[str]:
    out, at = [], ms(start)
    for _ in range(count):
        due = times.next_due(
            cron="30 2 * * *", every_ms=0, tz="Europe/Berlin", anchor_ms=0, after_ms=at
        )
        assert due is not None
        out.append(local(due))
        at = due
    return out


def test_a_0230_daily_in_berlin_fires_once_a_day_across_the_spring_change() -> None:
    # 2026-03-29: clocks go from 02:00 CET to 03:00 CEST; 02:30 does not exist that day.
    got = dailies(datetime(2026, 3, 27, 12, 0, tzinfo=BERLIN), 4)
    assert got == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # the skipped time runs at the first minute after the jump
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_0230_daily_in_berlin_fires_once_across_the_autumn_change() -> None:
    # 2026-10-25: clocks go from 03:00 CEST back to 02:00 CET; 02:30 happens twice.
    got = dailies(datetime(2026, 10, 23, 12, 0, tzinfo=BERLIN), 4)
    assert got == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # its first pass only
        "2026-10-26T02:30:00+01:00",
        "2026-10-27T02:30:00+01:00",
    ]
    # a node that looks again during the second 02:30 hour does not fire a second time
    second_pass = ms(datetime(2026, 10, 25, 2, 45, tzinfo=BERLIN, fold=1))
    again = times.next_due(
        cron="30 2 * * *", every_ms=0, tz="Europe/Berlin", anchor_ms=0, after_ms=second_pass
    )
    assert again is not None and local(again) == "2026-10-26T02:30:00+01:00"


def test_weekdays_at_nine_in_a_zone_are_nine_local_time() -> None:
    friday = ms(datetime(2026, 11, 27, 10, 0, tzinfo=BERLIN))
    due = times.next_due(
        cron="0 9 * * 1-5", every_ms=0, tz="Europe/Berlin", anchor_ms=0, after_ms=friday
    )
    assert due is not None and local(due) == "2026-11-30T09:00:00+01:00"  # the next Monday


def test_an_interval_is_due_at_whole_multiples_of_its_anchor() -> None:
    anchor = 1_000_000
    assert times.next_due(cron="", every_ms=2000, tz="UTC", anchor_ms=anchor, after_ms=anchor) == (
        anchor + 2000
    )
    assert times.next_due(
        cron="", every_ms=2000, tz="UTC", anchor_ms=anchor, after_ms=anchor + 2000
    ) == (anchor + 4000)
    assert times.next_due(
        cron="", every_ms=2000, tz="UTC", anchor_ms=anchor, after_ms=anchor + 4001
    ) == (anchor + 6000)


def test_dues_between_gives_the_latest_within_the_limit_and_the_whole_count() -> None:
    dues, count = times.dues_between(
        cron="", every_ms=1000, tz="UTC", anchor_ms=0, after_ms=0, until_ms=10_500, limit=3
    )
    assert (dues, count) == ([8000, 9000, 10_000], 10)
    dues, count = times.dues_between(
        cron="* * * * *", every_ms=0, tz="UTC", anchor_ms=0, after_ms=0, until_ms=300_000, limit=2
    )
    assert (dues, count) == ([240_000, 300_000], 5)
    assert times.dues_between(
        cron="", every_ms=1000, tz="UTC", anchor_ms=0, after_ms=5000, until_ms=5999, limit=3
    ) == ([], 0)


def test_a_cron_line_missed_past_the_count_cap_still_gives_its_latest_dues() -> None:
    until = (times.COUNT_CAP + 50) * 60_000
    dues, count = times.dues_between(
        cron="* * * * *", every_ms=0, tz="UTC", anchor_ms=0, after_ms=0, until_ms=until, limit=2
    )
    assert dues == [until - 60_000, until] and count == times.COUNT_CAP


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("61 * * * *", "minute"),
        ("* * * *", "five fields"),
        ("0 0 30 2 *", ""),
        ("not a cron line at all", "five fields"),
        ("*/0 * * * *", ""),
    ],
)
def test_a_malformed_cron_line_is_refused_naming_cron(line: str, words: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        times.check_cron(line, "UTC")
    assert caught.value.field == "cron" and words.lower() in str(caught.value).lower()


@pytest.mark.parametrize(
    "name", ["Mars/Olympus", "", "../../etc/passwd", "/etc/localtime", "x" * 80]
)
def test_an_unknown_time_zone_is_refused_naming_tz(name: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        times.zone(name)
    assert caught.value.field == "tz"


@pytest.mark.parametrize("text", ["0s", "0", "15", "15 minutes", "-1m", "1.5m", "367d", "999ms"])
def test_a_bad_or_zero_interval_is_refused_naming_every(text: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        times.parse_every(text)
    assert caught.value.field == "every"


def test_intervals_read_their_unit() -> None:
    assert [times.parse_every(t) for t in ("2s", "15m", "1h", "1d", "1500ms")] == [
        2000,
        900_000,
        3_600_000,
        86_400_000,
        1500,
    ]
