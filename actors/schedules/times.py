"""When a schedule is due: a cron line read in a time zone (cronsim, with ``zoneinfo``), or a
fixed interval from an anchor. Pure functions of their arguments; no clock.

cronsim follows Debian cron at daylight-saving changes, for lines that name a minute and an
hour (``30 2 * * *``): a time the clock skips runs at the first minute after the jump (02:30 on
the spring-forward day runs at 03:00), and a time the clock passes twice runs once, at its
first pass. Lines that run more often than hourly are read in real time (docs/schedules.md).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from cronsim import CronSim

MIN_EVERY_MS = 1_000
"""The shortest ``--every`` (one second)."""
MAX_EVERY_MS = 366 * 86_400_000
"""The longest ``--every`` (a leap year)."""
_EVERY = re.compile(r"([1-9][0-9]{0,9})(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def cron_sim(line: str, start: datetime, *, reverse: bool = False) -> CronSim:
    """cronsim's iterator over the due times of ``line`` from ``start``: cronsim is imported
    with the first cron line a node reads, not with every node."""
    from cronsim import CronSim

    return CronSim(line, start, reverse=reverse)


class InvalidSpec(ValueError):
    """A schedule's timing is malformed; ``field`` names which (``cron``, ``every``, ``tz``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def parse_every(text: str) -> int:
    """``15m`` as milliseconds: a whole number and one unit of ``ms s m h d``, at least
    :data:`MIN_EVERY_MS` and at most :data:`MAX_EVERY_MS`."""
    match = _EVERY.fullmatch(text.strip())
    if match is None:
        raise InvalidSpec(
            "every", "must be a positive whole number and a unit (ms, s, m, h, d), e.g. 15m"
        )
    return check_every(int(match[1]) * _UNIT_MS[match[2]])


def check_every(every_ms: int) -> int:
    """``every_ms`` if it is a usable interval."""
    if not MIN_EVERY_MS <= every_ms <= MAX_EVERY_MS:
        raise InvalidSpec("every", f"must be between 1s and 366d, not {every_ms} ms")
    return every_ms


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (``Europe/Berlin``, ``UTC``)."""
    if not name or name.startswith(("/", ".")) or ".." in name or len(name) > 64:
        raise InvalidSpec("tz", "is not an IANA time zone name (e.g. Europe/Berlin)")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSpec("tz", f"unknown time zone {name!r}") from None


def check_cron(line: str, tz: str) -> str:
    """``line`` if it is a five-field cron line cronsim reads (its first due time is computed:
    a line that never matches, such as ``0 0 30 2 *``, is refused)."""
    fields = line.split()
    if len(fields) != 5:
        raise InvalidSpec(
            "cron", f"must have five fields (minute hour day month weekday), not {len(fields)}"
        )
    from cronsim import CronSimError  # see cron_sim

    try:
        next(cron_sim(" ".join(fields), datetime(2000, 1, 1, tzinfo=zone(tz))))
    except CronSimError as exc:
        raise InvalidSpec("cron", str(exc) or "is not a cron line") from None
    except StopIteration:
        raise InvalidSpec("cron", "never matches a date") from None
    return " ".join(fields)


def next_due(*, cron: str, every_ms: int, tz: str, anchor_ms: int, after_ms: int) -> int | None:
    """The first due time strictly after ``after_ms`` (milliseconds since the epoch), or None
    when the cron line matches nothing more. A cron line is matched to the second: due times
    are whole seconds."""
    if every_ms > 0:
        if after_ms < anchor_ms:
            return anchor_ms + every_ms
        return anchor_ms + ((after_ms - anchor_ms) // every_ms + 1) * every_ms
    start = datetime.fromtimestamp(after_ms // 1000, UTC).astimezone(zone(tz))
    try:
        due = next(cron_sim(cron, start))
    except StopIteration:
        return None
    return int(due.timestamp()) * 1000


COUNT_CAP = 10_000
"""Missed due times of a cron line are counted one by one up to this many (the count a
``schedule.skipped`` records is then a lower bound); an interval's are counted exactly."""


def dues_between(
    *, cron: str, every_ms: int, tz: str, anchor_ms: int, after_ms: int, until_ms: int, limit: int
) -> tuple[list[int], int]:
    """The latest ``limit`` due times in ``(after_ms, until_ms]``, oldest first, and how many
    there are in all (for a cron line at most :data:`COUNT_CAP`)."""
    first = next_due(cron=cron, every_ms=every_ms, tz=tz, anchor_ms=anchor_ms, after_ms=after_ms)
    if first is None or first > until_ms:
        return [], 0
    if every_ms > 0:
        count = (until_ms - first) // every_ms + 1
        last = first + (count - 1) * every_ms
        return list(range(max(first, last - (limit - 1) * every_ms), last + 1, every_ms)), count
    dues = [first]
    while len(dues) <= COUNT_CAP:
        due = next_due(cron=cron, every_ms=0, tz=tz, anchor_ms=anchor_ms, after_ms=dues[-1])
        if due is None or due > until_ms:
            return dues[-limit:], len(dues)
        dues.append(due)
    latest: list[int] = []  # more than the cap: the latest ones, walking back from the end
    back = cron_sim(
        cron, datetime.fromtimestamp(until_ms // 1000 + 1, UTC).astimezone(zone(tz)), reverse=True
    )
    for due_at in back:
        due = int(due_at.timestamp()) * 1000
        if due <= after_ms or len(latest) == limit:
            break
        latest.append(due)
    return sorted(latest), COUNT_CAP
