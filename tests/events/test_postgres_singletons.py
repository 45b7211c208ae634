"""Named singleton leases (issue 24 step 5, events/postgres/leases.py): work one node of a
cluster runs, the watchdog or a channel connector. In one process with the clock moved by hand,
then three real node processes (tests/events/lease_node.py) wanting ``watchdog``: the holder
killed, then frozen past its TTL."""

from __future__ import annotations

import itertools
import signal
import time
from typing import Any

import psycopg
import pytest

from events import JournalError
from events.postgres.database import upgrade
from events.postgres.leases import Change, LeaseKeeper, LeaseSettings
from events.postgres.schema import SCHEMA_VERSION
from tests.events.test_postgres_leases import (
    BOUND_S,
    LeaseClock,
    Nodes,
    beliefs,
    keeper,
)
from tests.events.test_postgres_leases import dsn as dsn  # the fixtures
from tests.events.test_postgres_leases import nodes as nodes

WATCHDOG = "watchdog"


class Holder:
    """What a keeper's callbacks told the holder of ``watchdog``."""

    def __init__(self, k: LeaseKeeper, fail: bool = False) -> None:
        self.gained: list[int] = []
        self.lost: list[Change] = []
        self.held_when_gained: list[bool] = []
        self.keeper = k
        self.fail = fail
        k.want_singleton(WATCHDOG, on_gained=self.on_gained, on_lost=self.lost.append)

    def on_gained(self, token: int) -> None:
        self.held_when_gained.append(self.keeper.holds(WATCHDOG))
        self.gained.append(token)
        if self.fail:
            raise RuntimeError("the watchdog cannot start")


def holder_row(dsn: str) -> tuple[str | None, int]:
    """The node holding ``watchdog`` live in the database (None: free) and its token."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT n.node, s.token FROM singletons s LEFT JOIN nodes n ON n.node = s.node "
            "AND n.incarnation = s.incarnation AND n.expires_at > clock_timestamp() "
            "WHERE s.name = %s",
            (WATCHDOG,),
        ).fetchone()
    return (None, 0) if row is None else (row[0], int(row[1]))


# --- one process, ticked by hand ------------------------------------------------------------------


def test_a_free_singleton_goes_to_a_ready_node_and_stays_there(dsn: str) -> None:
    late = LeaseKeeper(dsn, "a", settings=LeaseSettings(ttl_s=2.0, ready_ticks=1))
    a = Holder(late)
    late.register()
    late.tick()  # live but not ready yet: takes nothing
    assert not late.holds(WATCHDOG) and holder_row(dsn) == (None, 0)
    k = keeper(dsn, "b")
    k.register()
    b = Holder(k)  # wanted after registering: any time will do
    k.tick()
    assert k.holds(WATCHDOG) and k.singletons() == [WATCHDOG]
    assert b.gained == [1] and b.held_when_gained == [True]
    for _ in range(3):  # a is ready now, but b holds it, renewing it with its row
        late.tick()
        k.tick()
    assert not late.holds(WATCHDOG) and a.gained == [] and b.lost == []
    assert holder_row(dsn) == ("b", 1)
    late.stop()
    k.stop()
    assert b.lost == ["released"] and not k.holds(WATCHDOG)


def test_of_two_nodes_that_found_it_free_one_takes_it(dsn: str) -> None:
    """The race the statement settles: b read the singleton free in the same tick as a, and
    asks to take it after a took it."""
    other = keeper(dsn, "b")
    other.register()
    other.tick()  # b is live and ready
    k = keeper(dsn, "a")
    Holder(k)
    k.register()
    k.tick()
    b = Holder(other)
    other._take_singleton(WATCHDOG)
    assert k.holds(WATCHDOG) and not other.holds(WATCHDOG) and b.gained == []
    assert holder_row(dsn) == ("a", 1)
    k.stop()
    other.stop()


def test_a_singleton_needs_a_name(dsn: str) -> None:
    k = keeper(dsn, "a")
    with pytest.raises(JournalError, match="name"):
        k.want_singleton("")
    k.stop()


def test_past_its_deadline_the_holder_stops_then_takes_it_again_with_a_new_token(
    dsn: str,
) -> None:
    clock = LeaseClock()
    k = keeper(dsn, "a", clock)
    a = Holder(k)
    k.register()
    k.tick()
    assert k.holds(WATCHDOG) and a.gained == [1]
    clock.now = k.deadline  # the deadline itself is too late, before the tick thread notices
    assert not k.holds(WATCHDOG) and k.singletons() == []
    k._fence_if_late()  # what the tick thread does at the deadline
    assert a.lost == ["fenced"]
    clock.now += 1
    k.tick()  # its row had not lapsed: freed (token bumped) and taken again
    assert k.holds(WATCHDOG) and a.gained == [1, 3]
    assert holder_row(dsn) == ("a", 3)
    k.stop()


def test_drain_releases_it_to_the_next_tick_of_another(dsn: str) -> None:
    k = keeper(dsn, "a")
    a = Holder(k)
    k.register()
    k.tick()
    other = keeper(dsn, "b")
    b = Holder(other)
    other.register()
    other.tick()
    assert b.gained == []
    k.drain()
    assert a.lost == ["released"]
    other.tick()  # the very next tick, no TTL waited
    assert other.holds(WATCHDOG) and b.gained == [2]
    other.stop()


def test_a_holder_whose_row_lapsed_hears_it_lost(dsn: str) -> None:
    """Frozen past its TTL as the database sees it, though its own clock did not move: its next
    renewal finds its row lapsed and another node holding the singleton."""
    k = keeper(dsn, "a")
    a = Holder(k)
    k.register()
    k.tick()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE nodes SET expires_at = clock_timestamp() WHERE node = 'a'")
    other = keeper(dsn, "b")
    b = Holder(other)
    other.register()
    other.tick()
    assert b.gained == [2]
    k.tick()
    assert a.lost == ["lapsed"] and not k.holds(WATCHDOG)
    k.tick()  # a new incarnation, and b still holds it
    assert a.gained == [1] and holder_row(dsn) == ("b", 2)
    k.stop()
    other.stop()


def test_a_holder_that_cannot_start_releases_it(dsn: str) -> None:
    k = keeper(dsn, "a")
    a = Holder(k, fail=True)
    k.register()
    k.tick()
    assert a.gained == [1] and not k.holds(WATCHDOG)
    assert holder_row(dsn) == (None, 2)
    other = keeper(dsn, "b")
    b = Holder(other)
    other.register()
    other.tick()
    assert b.gained == [3]
    k.stop()
    other.stop()
    assert a.lost == []  # it never ran


def test_a_holder_whose_work_failed_later_gives_it_back_and_waits_its_pause(dsn: str) -> None:
    """``give_back``: the work started after ``on_gained`` returned (on a thread of its own)
    and failed. The next tick frees it for another node; this one takes it again only after the
    pause. A stale token (the lease lost and taken again meanwhile) frees nothing."""
    clock = LeaseClock()
    k = keeper(dsn, "a", clock)
    a = Holder(k)
    k.register()
    k.tick()
    assert a.gained == [1]
    k.give_back(WATCHDOG, 0, pause_s=0.0)  # not its token: nothing freed
    k.tick()
    assert k.holds(WATCHDOG) and holder_row(dsn) == ("a", 1)
    k.give_back(WATCHDOG, 1, pause_s=10.0)
    assert k.holds(WATCHDOG)  # until the tick frees it
    k.tick()
    assert not k.holds(WATCHDOG) and holder_row(dsn) == (None, 2) and a.lost == []
    clock.now += 5.0
    k.tick()  # paused: free, and not taken
    assert holder_row(dsn) == (None, 2) and a.gained == [1]
    other = keeper(dsn, "b")
    b = Holder(other)
    other.register()
    other.tick()  # another node's turn
    assert b.gained == [3]
    other.give_back(WATCHDOG, 3, pause_s=10.0)
    other.tick()
    assert holder_row(dsn) == (None, 4)
    clock.now += 5.0  # a's pause is over: it takes it again
    k.tick()
    assert k.holds(WATCHDOG) and a.gained == [1, 5]
    k.stop()
    other.stop()


def test_a_version_5_journal_is_upgraded_to_hold_singletons(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE singletons")
        conn.execute("UPDATE cluster SET schema_version = 5")
    upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT schema_version FROM cluster").fetchone() == (SCHEMA_VERSION,)
    assert SCHEMA_VERSION == 7
    k = keeper(dsn, "a")
    Holder(k)
    k.register()
    k.tick()
    assert k.holds(WATCHDOG)
    k.stop()


# --- three node processes -------------------------------------------------------------------------

WANT = f"--want={WATCHDOG}"


def gains(group: Nodes, since: float) -> list[tuple[float, str]]:
    """Each (when, node) that acquired ``watchdog`` after ``since`` (monotonic), first first."""
    return sorted(
        (line["at"], name)
        for name, log in group.runs
        for line in group.read(log)
        if line["change"] == "acquired" and line.get("singleton") == WATCHDOG
        if line["at"] > since
    )


def of(lines: list[dict[str, Any]], change: str) -> list[dict[str, Any]]:
    return [x for x in lines if x["change"] == change and x.get("singleton") == WATCHDOG]


def test_one_node_holds_the_watchdog_through_a_kill_and_a_freeze(nodes: Nodes) -> None:
    """SIGKILL the holder, then SIGSTOP the next past its TTL: each time another takes it over
    within TTL + one tick + 0.5 s; the frozen one lost it at its own deadline, before the next
    gained it, and resumed it neither believes it holds it nor works; never two holders."""
    for name in "abc":
        nodes.start(name, WANT)
    nodes.wait("someone holds the watchdog", lambda: holder_row(nodes.dsn)[0] is not None)
    first = holder_row(nodes.dsn)[0]
    assert first is not None
    nodes.wait(f"{first} works", lambda: bool(of(nodes.lines(first), "working")))

    killed = time.monotonic()
    nodes.procs[first].kill()
    nodes.procs[first].wait()
    nodes.wait("the watchdog taken over after the kill", lambda: bool(gains(nodes, killed)))
    took, second = gains(nodes, killed)[0]
    assert second != first and took - killed <= BOUND_S, f"{took - killed:.2f} s"
    nodes.wait(f"{second} works", lambda: bool(of(nodes.lines(second), "working")))

    frozen = nodes.procs[second]
    stopped = time.monotonic()
    frozen.send_signal(signal.SIGSTOP)
    nodes.wait("the watchdog taken over after the freeze", lambda: bool(gains(nodes, stopped)))
    took, third = gains(nodes, stopped)[0]
    assert third not in (first, second) and took - stopped <= BOUND_S, f"{took - stopped:.2f} s"
    time.sleep(0.5)
    frozen.send_signal(signal.SIGCONT)
    nodes.wait(f"{second} told it lost it", lambda: bool(of(nodes.lines(second), "lost")))
    (fenced,) = of(nodes.lines(second), "fenced")
    assert fenced["at"] <= took  # its own deadline passed before the next node gained it
    assert [x["why"] for x in of(nodes.lines(second), "lost")] == ["fenced"]
    time.sleep(0.5)  # resumed: it works no more, and believes it holds nothing
    assert not [x for x in of(nodes.lines(second), "working") if x["at"] >= fenced["at"]]
    assert holder_row(nodes.dsn)[0] == third
    end = time.monotonic()
    nodes.close()  # SIGTERM: each drains, the holder is told it released the watchdog
    assert of(nodes.lines(third), "lost")[-1]["why"] == "released"

    # Never two holders: each process's beliefs (from acquired to its loss, or to the deadline
    # its last renewal set) are disjoint, tokens rising; every ``working`` inside its own.
    spans: list[tuple[float, float, int]] = []
    for name, log in nodes.runs:
        lines = nodes.read(log)
        mine = [
            (t0, t1, token)
            for _, t0, t1, token in beliefs(lines, killed if name == first else end, "singleton")
        ]
        for work in of(lines, "working"):
            assert any(t0 < work["at"] < t1 for t0, t1, _ in mine), (name, work)
        spans += mine
    assert len(spans) >= 3
    for (_, end0, token0), (start1, _, token1) in itertools.pairwise(sorted(spans)):
        assert end0 <= start1, "two holders at once"
        assert token1 > token0
