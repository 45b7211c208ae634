"""``reel schedules`` as a user runs it, against real ``reel node`` processes: offline on a fresh
data dir and online through the API; a ``kill -9`` across two due times with each catch-up
mode; bad timing exits 2 naming the option."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from events import JournalReader
from events.catalog import ScheduleFired, ScheduleSkipped, kinds_of
from tests.processes import REEL, spawned
from tests.transports.cli.nodekit import api, environment, reel, running_node


def data_args(data: Path) -> tuple[str, str]:
    return ("--data", str(data))


def schedule_events(data: Path) -> list[Any]:
    reader = JournalReader(data / "journal.db")
    try:
        return [
            r.decode() for r in reader.events_of_kinds(kinds_of(ScheduleFired, ScheduleSkipped))
        ]
    finally:
        reader.close()


@contextmanager
def node_process(data: Path) -> Iterator[subprocess.Popen[str]]:
    """A ``reel node`` on ``data``, up (its ready line read) for the block."""
    with spawned(
        [REEL, "node", *data_args(data)],
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as node:
        assert node.stdout is not None
        ready = node.stdout.readline()
        assert ready.startswith("reel node ready"), ready
        yield node


def wait_for(check: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


def test_create_list_pause_resume_delete_offline_then_online(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    assert reel("schedules", "list", *data_args(data)).stdout.startswith("no schedules")
    made = reel(
        "schedules", "create", "daily", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin",
        "--session-key", "reports", "--text", "the daily report", "--json", *data_args(data),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert (info["runs_as"], info["created_by"], info["status"]) == ("admin", "cli", "active")
    assert reel("schedules", "pause", "daily", *data_args(data)).returncode == 0
    nobody = reel(
        "schedules", "create", "x", "--every", "1h", "--session-key", "k", "--text", "t",
        "--as", "user:nobody", *data_args(data),
    )  # fmt: skip
    assert nobody.returncode == 2 and "--as" in nobody.stderr, nobody.stderr
    with running_node([str(REEL), "node", *data_args(data)]):
        listed = json.loads(reel("schedules", "list", "--json", *data_args(data)).stdout)
        assert [(s["name"], s["status"]) for s in listed] == [("daily", "paused")]
        assert reel("schedules", "resume", "daily", *data_args(data)).returncode == 0
        again = reel("schedules", "resume", "daily", *data_args(data))
        assert again.returncode == 1 and "not paused" in again.stderr, again.stderr
        fired = reel("schedules", "run-now", "daily", "--json", *data_args(data))
        assert fired.returncode == 0, fired.stderr
        run_id = json.loads(fired.stdout)["run_id"]
        wait_for(lambda: api(data, "GET", f"/v1/runs/{run_id}")[0] == 200)
        assert reel("schedules", "delete", "daily", *data_args(data)).returncode == 0
        gone = reel("schedules", "delete", "daily", *data_args(data))
        assert gone.returncode == 2 and "no schedule named 'daily'" in gone.stderr
    offline_run = reel("schedules", "run-now", "daily", *data_args(data))
    assert offline_run.returncode == 2 and "running node" in offline_run.stderr


@pytest.mark.parametrize("mode", ["skip", "one", "all"])
def test_a_kill_9_across_two_due_times_follows_catch_up(tmp_path: Path, mode: str) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with node_process(data) as first:
        made = reel(
            "schedules", "create", "tick", "--every", "2s", "--session-key", "k",
            "--text", "tick", "--catch-up", mode, "--overlap", "queue", *data_args(data),
        )  # fmt: skip
        assert made.returncode == 0, made.stderr
        wait_for(lambda: any(isinstance(e, ScheduleFired) for e in schedule_events(data)))
        first.kill()  # kill -9: no drain, no final checkpoint
        first.wait()
    before = schedule_events(data)
    handled = max(e.due_ms for e in before)
    time.sleep(4.5)  # at least two due times pass while no node runs
    with node_process(data):
        wait_for(lambda: any(
            isinstance(e, ScheduleFired) and e.trigger == "due"
            for e in schedule_events(data)[len(before):]
        ))  # fmt: skip
    after = schedule_events(data)[len(before) :]
    caught = [e for e in after if isinstance(e, ScheduleFired) and e.trigger == "catch_up"]
    skipped = [e for e in after if isinstance(e, ScheduleSkipped) and e.reason == "catch_up"]
    missed = sum(s.count for s in skipped) + len(caught)
    assert missed >= 2, after
    if mode == "skip":
        assert caught == [] and len(skipped) == 1
    elif mode == "one":
        assert len(caught) == 1 and skipped[0].count == missed - 1
        assert caught[0].due_ms == handled + missed * 2000  # the latest missed one
    else:
        assert skipped == []
        assert [c.due_ms for c in caught] == [handled + 2000 * i for i in range(1, missed + 1)]
    fired = [e.due_ms for e in before + after if isinstance(e, ScheduleFired)]
    assert len(fired) == len(set(fired))  # no due time fired twice


@pytest.mark.parametrize(
    ("args", "named", "why"),
    [
        (("--cron", "61 * * * *"), "--cron", "minute"),
        (("--cron", "0 9 * *"), "--cron", "five fields"),
        (("--cron", "0 9 * * *", "--tz", "Mars/Olympus"), "--tz", "unknown time zone"),
        (("--cron", "0 9 * * *", "--every", "1m"), "--cron / --every", "exactly one"),
        ((), "--cron / --every", "exactly one"),
        (("--every", "0s"), "--every", "positive"),
        (("--every", "0"), "--every", ""),
        (("--every", "1m", "--catch-up", "most"), "--catch-up", "skip, one, all"),
    ],
)
def test_bad_timing_exits_2_naming_the_option_and_changes_nothing(
    tmp_path: Path, args: tuple[str, ...], named: str, why: str
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    done = reel(
        "schedules", "create", "x", "--session-key", "k", "--text", "t", *args, *data_args(data)
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert named in line and why in line, line
    assert reel("schedules", "list", "--json", *data_args(data)).stdout.strip() == "[]"
