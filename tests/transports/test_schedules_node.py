"""Schedules on a real node (docs/schedules.md): a node with its HTTP API on loopback, a real
SQLite journal and real Cedar. A schedule every 2 s fires runs as its principal; a paused one
fires nothing; a principal whose token is revoked stops its schedule with a watchdog incident;
bad input is a 400 naming the field; who may schedule as whom is Cedar's; and a run fired and
never started (a crash between the two) is started once, at the next start, never twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from actors.budgets.config import Budget
from actors.schedules.desk import ScheduleBook, load_schedules
from events import JournalReader
from events.catalog import (
    Event,
    RunAccepted,
    ScheduleCreated,
    ScheduleFired,
    ScheduleRunNotStarted,
    ScheduleRunStarted,
    ScheduleStopped,
    kinds_of,
)
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.cli.offline import journal_writer
from transports.config import WatchdogSection
from transports.http.openapi import document


@pytest.fixture
def node(tmp_path: Path) -> Iterator[HttpNode]:
    running = open_node(tmp_path / "data", watchdog=WatchdogSection(interval_s=0.1))
    try:
        yield running
    finally:
        close_node(running)


def token(node: HttpNode, principal: str, role: str) -> tuple[str, str]:
    """A bearer header for a new token of ``principal`` with ``role``, and the token's id."""
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    return f"Bearer {reply.json()['token']}", reply.json()["id"]


def of(journal: Any, *classes: type[Event]) -> list[Any]:
    """The journal's rows of ``classes``, in order, as (principal, event)."""
    return [(row.principal, row.decode()) for row in journal.events_of_kinds(kinds_of(*classes))]


def started(journal: Any, run_id: str) -> bool:
    """Whether ``schedule.run_started`` names ``run_id``."""
    return any(e.run_id == run_id for _, e in of(journal, ScheduleRunStarted))


def started_twice(journal: Any) -> bool:
    return len(of(journal, ScheduleRunStarted)) == 2


def create(node: HttpNode, auth: str = "default", **fields: Any) -> Any:
    body = {"name": "tick", "every": "2s", "session_key": "sched", "text": "scheduled hi"}
    reply = node.call("POST", "/v1/schedules", {**body, **fields}, auth=auth)
    check(document(), "POST", "/v1/schedules", reply)
    return reply


def test_a_schedule_every_2s_fires_runs_as_its_principal(node: HttpNode) -> None:
    alice, _ = token(node, "user:alice", "operator")
    made = create(node, alice)
    assert made.status == 201, made
    info = made.json()
    assert info["runs_as"] == "user:alice" and info["status"] == "active"
    journal = node.runtime.journal

    assert eventually(lambda: len(of(journal, ScheduleRunStarted)) >= 2, timeout=30)
    fired = [e for _, e in of(journal, ScheduleFired)]
    (created,) = [e for _, e in of(journal, ScheduleCreated)]
    assert info["next_due_ms"] == created.anchor_ms + 2000  # due times count from the creation
    assert [f.due_ms for f in fired[:2]] == [created.anchor_ms + 2000, created.anchor_ms + 4000]
    assert all(who == "user:alice" for who, _ in of(journal, ScheduleFired))
    accepted = {e.run_id: (who, e) for who, e in of(journal, RunAccepted)}
    for _, started_event in of(journal, ScheduleRunStarted)[:2]:
        who, run = accepted[started_event.run_id]
        assert who == "user:alice" and run.channel == "schedule"
        assert run.text == "scheduled hi" and run.session_id == started_event.session_id
    node.finish(fired[0].run_id)
    listed = node.call("GET", "/v1/schedules")
    check(document(), "GET", "/v1/schedules", listed)
    (row,) = listed.json()["items"]
    assert row["name"] == "tick" and row["fired"] >= 2


def test_a_paused_schedule_fires_nothing_until_resumed(node: HttpNode) -> None:
    assert create(node, every="1s").status == 201
    paused = node.call("POST", "/v1/schedules/tick/pause")
    check(document(), "POST", "/v1/schedules/tick/pause", paused)
    assert paused.status == 200 and paused.json()["status"] == "paused"
    assert paused.json()["next_due_ms"] is None
    journal = node.runtime.journal
    before = len(of(journal, ScheduleFired))  # one may have fired before the pause
    time.sleep(3.5)  # three due times pass (a wait; nothing is timed)
    assert len(of(journal, ScheduleFired)) == before
    again = node.call("POST", "/v1/schedules/tick/pause")
    assert again.status == 409, again
    resumed = node.call("POST", "/v1/schedules/tick/resume")
    assert resumed.status == 200 and resumed.json()["status"] == "active"
    assert eventually(lambda: len(of(journal, ScheduleFired)) > before, timeout=20)
    fired = [e for _, e in of(journal, ScheduleFired)][before:]
    assert all(f.trigger == "due" for f in fired)  # the pause is not caught up


def test_a_revoked_principal_stops_its_schedule_with_an_incident(node: HttpNode) -> None:
    alice, alice_id = token(node, "user:alice", "operator")
    assert create(node, alice, every="1s").status == 201
    journal = node.runtime.journal
    assert eventually(lambda: of(journal, ScheduleRunStarted), timeout=20)
    assert node.call("DELETE", f"/v1/tokens/{alice_id}").status == 200
    assert eventually(lambda: of(journal, ScheduleStopped), timeout=20)
    ((who, stopped),) = of(journal, ScheduleStopped)
    assert who == "node" and stopped.reason == "principal_revoked"
    fired_then = len(of(journal, ScheduleFired))

    def incident() -> list[Any]:
        items = node.call("GET", "/v1/incidents").json()["items"]
        return [i for i in items if i["domain"] == "schedule" and i["state"] == "open"]

    assert eventually(incident, timeout=20), node.call("GET", "/v1/incidents").json()
    (opened,) = incident()
    assert opened["subject"] == stopped.schedule_id
    (row,) = node.call("GET", "/v1/schedules").json()["items"]
    assert row["status"] == "stopped" and row["stopped"] == "principal_revoked"
    assert node.call("POST", "/v1/schedules/tick/resume").status == 409
    time.sleep(2.5)  # due times pass: a stopped schedule fires nothing
    assert len(of(journal, ScheduleFired)) == fired_then
    assert node.call("DELETE", "/v1/schedules/tick").status == 200
    assert eventually(lambda: not incident(), timeout=20)  # deleting it resolves the incident


def test_a_scheduled_run_is_held_to_its_principals_budget(tmp_path: Path) -> None:
    """The schedule runs as its principal, within that principal's budgets: with one run an
    hour allowed, the first fire starts and the next is refused by the node, naming the
    budget."""
    one_an_hour = Budget(
        scope="principal", subject="user:alice", measure="runs", period="hour", hard=1
    )
    node = open_node(tmp_path / "data", budgets={"alice_hourly": one_an_hour})
    try:
        alice, _ = token(node, "user:alice", "operator")
        assert create(node, alice, every="1s").status == 201
        journal = node.runtime.journal
        assert eventually(lambda: len(of(journal, ScheduleRunNotStarted)) >= 1, timeout=30)
        (first, *_) = [e for _, e in of(journal, ScheduleRunNotStarted)]
        assert "budget alice_hourly" in first.error and "hard limit" in first.error
        assert len(of(journal, ScheduleRunStarted)) == 1
        accepted = [who for who, _ in of(journal, RunAccepted)]
        assert accepted == ["user:alice"]
    finally:
        close_node(node)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "61 * * * *", "every": None}, "$.cron"),
        ({"cron": "0 9 * * 1-5", "every": None, "tz": "Europe/Atlantis"}, "$.tz"),
        ({"cron": "0 9 * * 1-5"}, "$.cron"),  # both
        ({"every": None}, "$.cron"),  # neither
        ({"every": "0s"}, "$.every"),
        ({"every": "soon"}, "$.every"),
        ({"name": "no spaces please"}, "$.name"),
        ({"runs_as": "user:nobody"}, "$.runs_as"),  # holds no token
        ({"catch_up": "sometimes"}, "$.catch_up"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_recorded(
    node: HttpNode, fields: dict[str, Any], field: str
) -> None:
    reply = create(node, **fields)
    assert reply.status == 400, reply
    assert reply.error["field"] == field, reply.error
    assert of(node.runtime.journal, ScheduleCreated) == []


def test_who_may_schedule_as_whom_is_cedars(node: HttpNode) -> None:
    bob, _ = token(node, "agent:bob", "agent")
    token(node, "user:alice", "operator")
    viewer, _ = token(node, "user:vera", "viewer")
    assert create(node, bob, name="mine").status == 201  # as itself
    assert create(node, bob, name="hers", runs_as="user:alice").status == 403
    assert create(node, viewer, name="viewers").status == 403
    assert create(node, name="admins", runs_as="user:alice").status == 201  # admins: anyone
    assert node.call("POST", "/v1/schedules/admins/pause", auth=bob).status == 403
    assert node.call("POST", "/v1/schedules/mine/pause", auth=bob).status == 200
    assert node.call("GET", "/v1/schedules", auth=viewer).status == 200
    assert node.call("POST", "/v1/schedules/nothere/pause").status == 404
    assert (
        node.call("POST", "/v1/schedules/ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X/run").status
        == 404
    )


def test_a_schedule_cannot_reach_into_a_session_its_principal_may_not_run_in(
    node: HttpNode,
) -> None:
    alice, _ = token(node, "agent:alice", "agent")
    bob, _ = token(node, "agent:bob", "agent")
    hers = node.call("POST", "/v1/sessions", {"session_key": "hers"}, auth=alice)
    assert hers.status == 201, hers
    made = create(node, bob, name="sneak", every="1s", session_key="hers")
    assert made.status == 201, made  # bob may schedule as himself; the session is checked per run
    journal = node.runtime.journal
    assert eventually(lambda: of(journal, ScheduleRunNotStarted), timeout=20)
    (who, refused), *_ = of(journal, ScheduleRunNotStarted)
    assert who == "agent:bob" and "may not run.start" in refused.error, refused
    assert [e for _, e in of(journal, RunAccepted) if e.channel == "schedule"] == []
    sessions = node.call("GET", "/v1/sessions", auth=alice).json()["items"]
    assert [s["runs"] for s in sessions if s["session_key"] == "hers"] == [0]


def test_a_run_fired_and_never_started_is_started_once_at_the_next_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = open_node(data)
    try:
        assert create(first, every="1d").status == 201
    finally:
        close_node(first)
    # What a crash between the two appends leaves: schedule.fired and no run.
    with journal_writer(data, "test") as offline:
        book = ScheduleBook(offline, load_schedules(offline), max_text_bytes=1000)
        _, run_id = book.fire_now("tick", by="cli", now_ms=1)
    for _ in range(2):  # a second start has nothing left to ask for
        again = open_node(data)
        try:
            assert eventually(partial(started, again.runtime.journal, run_id), timeout=20)
            again.finish(run_id)
        finally:
            close_node(again)
    # And one whose run did start: asked for again, the session answers with it.
    with journal_writer(data, "test") as offline:
        book = ScheduleBook(offline, load_schedules(offline), max_text_bytes=1000)
        schedule = book.state.named("tick")
        assert schedule is not None and schedule.pending == ()
        book.append(
            schedule.schedule_id,
            [
                ScheduleFired(
                    schedule_id=schedule.schedule_id, run_id=run_id, due_ms=2, trigger="manual"
                )
            ],
            "cli",
        )
    last = open_node(data)
    try:
        assert eventually(partial(started_twice, last.runtime.journal), timeout=20)
    finally:
        close_node(last)
    reader = JournalReader(data / "journal.db")
    try:
        accepted = [e.run_id for _, e in of(reader, RunAccepted)]
    finally:
        reader.close()
    assert accepted.count(run_id) == 1
