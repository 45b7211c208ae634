"""Leases and fencing with several nodes (issue 24 step 2, events/postgres/leases.py): the
placement, the fences inside ``shard_append`` and on the node's own clock, and three real node
processes on one PostgreSQL that are killed, frozen past their TTL, restarted and drained."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from events import Fenced, JournalLocked, ShardNotOwned
from events.catalog import RunOutput
from events.postgres.database import initialise, upgrade
from events.postgres.homes import shard_of
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseChange, LeaseKeeper, LeaseSettings
from events.postgres.placement import capacity, place
from events.postgres.reader import PostgresReader
from events.postgres.schema import FENCED, SCHEMA_VERSION
from events.postgres.verify import verify_database
from tests.events.postgres_raw import raw_append
from tests.postgres_server import PostgresServer

SHARDS = 8
NODE = Path(__file__).with_name("lease_node.py")


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    dsn = postgres.database()
    assert initialise(dsn, SHARDS)
    return dsn


class LeaseClock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


# --- placement ---------------------------------------------------------------------------------


def test_placement_is_the_same_on_every_node_and_bounded() -> None:
    nodes = ["a", "b", "c"]
    targets = place(64, nodes)
    assert targets == place(64, list(reversed(nodes)))  # every node computes the same
    assert sorted(targets) == list(range(64))
    loads = [list(targets.values()).count(n) for n in nodes]
    assert max(loads) <= capacity(64, 3) and min(loads) > 0
    assert place(64, []) == {}
    assert set(place(64, ["a"]).values()) == {"a"}


def test_a_node_leaving_moves_its_own_shards_and_few_others() -> None:
    before = place(64, ["a", "b", "c", "d"])
    after = place(64, ["a", "b", "c"])
    moved = {s for s in before if before[s] != "d" and after[s] != before[s]}
    assert all(after[s] != "d" for s in after)
    assert len(moved) <= 64 // 4  # rendezvous: mostly only d's shards move


# --- the fences, in one process ------------------------------------------------------------------


def keeper(dsn: str, node: str, clock: LeaseClock | None = None, **kw: Any) -> LeaseKeeper:
    settings = LeaseSettings(ttl_s=2.0, ready_ticks=0)
    return LeaseKeeper(dsn, node, settings=settings, clock=clock or time.monotonic, **kw)


def test_a_lone_node_takes_every_shard_and_appends_with_its_tokens(dsn: str) -> None:
    changes: list[LeaseChange] = []
    k = keeper(dsn, "a", on_change=changes.append)
    k.register()
    k.tick()  # renew: ready, then place: every shard is free and placed on a
    assert sorted(k.owned()) == list(range(SHARDS))
    journal = PostgresJournal(dsn, node="a", leases=k)
    try:
        result = journal.append("run/1", [out()], expected_seq=0)
        assert result.first_position == 1
    finally:
        journal.close()
        k.stop()
    assert [c.change for c in changes].count("acquired") == SHARDS
    assert verify_database(dsn).ok


def test_past_its_deadline_a_node_sends_nothing(dsn: str) -> None:
    """Self-fencing on the node's own clock: past ``renewal + TTL - margin`` every append fails
    ShardNotOwned before it reaches the database, though the database still holds the lease."""
    clock = LeaseClock()
    k = keeper(dsn, "a", clock)
    k.register()
    k.tick()
    journal = PostgresJournal(dsn, node="a", leases=k)
    try:
        journal.append("run/1", [out()], expected_seq=0)
        clock.now = k.deadline  # the deadline itself is already too late
        with pytest.raises(ShardNotOwned, match="no live lease"):
            journal.append("run/1", [out()], expected_seq=None)
        assert k.owned() == {}
        assert journal.head().position == 1
        k._fence_if_late()  # what the tick thread does at the deadline
        clock.now += 1  # renews after the fence: the shards it held in the database are freed
        k.tick()  # (tokens bumped) and placed again like any free shard
        tokens = k.owned()
        assert sorted(tokens) == list(range(SHARDS))
        assert journal.append("run/1", [out()], expected_seq=1).first_seq == 1
    finally:
        journal.close()
        k.stop()


def test_a_lapsed_node_row_fences_its_current_token_in_the_database(dsn: str) -> None:
    """Nobody took the shard yet, the token is still current: the lease lapsed with its node's
    row on the database clock, and shard_append refuses it (nothing recorded after it lapsed)."""
    k = keeper(dsn, "a")
    k.register()
    k.tick()
    shard, token = next(iter(k.owned().items()))
    raw_append(dsn, shard, token, stream=f"zombie/{shard}")  # live: let through
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE nodes SET expires_at = clock_timestamp() WHERE node = 'a'")
    with pytest.raises(psycopg.Error) as refused:
        raw_append(dsn, shard, token, stream=f"zombie/{shard}")
    assert refused.value.sqlstate == FENCED
    k.tick()  # its renewal finds the row lapsed: everything dropped, a new incarnation
    assert k.owned() == {} and k.incarnation == 2
    k.stop()
    with psycopg.connect(dsn) as conn:
        (n,) = conn.execute("SELECT count(*) FROM events").fetchone() or (0,)
    assert n == 1


def test_a_takeover_fences_the_old_owner(dsn: str) -> None:
    clock = LeaseClock()
    a = keeper(dsn, "a", clock)
    a.register()
    a.tick()
    journal = PostgresJournal(dsn, node="a", leases=a)
    shard = shard_of("run/1", SHARDS)
    try:
        journal.append("run/1", [out()], expected_seq=0)
        stale = a.owned()[shard]
        with psycopg.connect(dsn, autocommit=True) as conn:  # a's row lapses (a was frozen)
            conn.execute("UPDATE nodes SET expires_at = clock_timestamp() WHERE node = 'a'")
        b = keeper(dsn, "b")
        b.register()
        b.tick()
        assert shard in b.owned() and b.owned()[shard] > stale
        # a, unfrozen, still believes (its clock did not move): the database refuses it
        with pytest.raises(Fenced, match=f"shard {shard}"):
            journal.append("run/1", [out()], expected_seq=None)
        b.stop()
    finally:
        journal.close()
        a.stop()
    reader = PostgresReader(dsn)
    assert len(reader.read_stream("run/1")) == 1
    reader.close()


def test_drain_hands_every_shard_over_at_once(dsn: str) -> None:
    a = keeper(dsn, "a")
    a.register()
    a.tick()
    b = keeper(dsn, "b")
    b.register()
    b.tick()  # b is placed some shards, but a holds them all: a hands over one per tick
    assert b.owned() == {}
    a.tick()
    assert len(a.owned()) == SHARDS - 1
    b.tick()
    assert len(b.owned()) == 1
    a.drain()
    b.tick()  # the very next tick, no TTL waited
    assert sorted(b.owned()) == list(range(SHARDS))
    b.stop()


def test_a_join_takes_a_busy_shard_only_once_its_work_ends_or_the_wait_runs_out(
    dsn: str,
) -> None:
    clock = LeaseClock()
    busy = dict.fromkeys(range(SHARDS), True)  # every shard has a run working on a
    a = LeaseKeeper(
        dsn,
        "a",
        settings=LeaseSettings(ttl_s=2.0, ready_ticks=0, handover_wait_s=1.0),
        clock=clock,
        busy=lambda shard: busy[shard],
    )
    a.register()
    a.tick()
    b = keeper(dsn, "b")
    b.register()
    b.tick()  # b is placed some shards, all busy on a: a hands none over
    for _ in range(3):
        clock.now += 0.2
        a.tick()
    assert len(a.owned()) == SHARDS
    targets = place(SHARDS, ["a", "b"])
    first, second, *_ = sorted(s for s in range(SHARDS) if targets[s] == "b")
    busy[first] = False  # its run ended
    a.tick()
    assert first not in a.owned() and len(a.owned()) == SHARDS - 1
    clock.now += 1.0  # the others waited handover_wait_s: handed over anyway, one per tick
    a.tick()
    assert second not in a.owned() and len(a.owned()) == SHARDS - 2
    a.stop()
    b.stop()


def test_a_lone_writer_and_a_cluster_exclude_each_other(dsn: str) -> None:
    a = keeper(dsn, "a")
    a.register()
    alone = PostgresJournal(dsn)
    try:
        with pytest.raises(JournalLocked, match="lone reel node"):
            PostgresJournal(dsn, node="a", leases=a)
    finally:
        alone.close()
    clustered = PostgresJournal(dsn, node="a", leases=a)
    try:
        with pytest.raises(JournalLocked, match="another reel node"):
            PostgresJournal(dsn)
    finally:
        clustered.close()
        a.stop()
    again = PostgresJournal(dsn, node="a")  # a lone node named as a cluster node once was
    try:
        assert again.append("run/1", [out()], expected_seq=0).first_seq == 0
    finally:
        again.close()


def test_a_node_name_live_elsewhere_is_refused(dsn: str) -> None:
    a = keeper(dsn, "a")
    a.register()
    twin = keeper(dsn, "a")
    with pytest.raises(JournalLocked, match="node name a is live"):
        twin.start(timeout=0)
    twin.stop()
    a.stop()


def test_a_shard_whose_chain_fails_verification_is_not_taken(dsn: str) -> None:
    alone = PostgresJournal(dsn)
    shard = shard_of("run/1", SHARDS)
    alone.append("run/1", [out(), out()], expected_seq=0)
    alone.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        conn.execute("UPDATE events SET payload = payload || '\\x00'::bytea WHERE position = 2")
    changes: list[LeaseChange] = []
    a = keeper(dsn, "a", on_change=changes.append)
    a.register()
    a.tick()
    assert sorted(a.owned()) == [s for s in range(SHARDS) if s != shard]
    (refused,) = [c for c in changes if c.change == "refused"]
    assert refused.shard == shard and "altered_payload" in refused.reason
    a.tick()  # not tried again
    assert len([c for c in changes if c.change == "refused"]) == 1
    a.stop()


def test_a_shard_whose_recovery_fails_is_freed_not_owned(dsn: str) -> None:
    recovered: list[tuple[int, int]] = []

    def recover(shard: int, token: int) -> None:
        if shard == 3:
            raise RuntimeError("recovery failed")
        recovered.append((shard, token))

    a = keeper(dsn, "a", on_acquired=recover)
    a.register()
    a.tick()
    assert sorted(a.owned()) == [s for s in range(SHARDS) if s != 3]
    assert sorted(recovered) == sorted(a.owned().items())  # recovered before owned
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT node FROM shard_lease WHERE shard = 3").fetchone() == (None,)
    a.stop()


def test_a_version_1_journal_is_upgraded_in_place(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE nodes")
        conn.execute("UPDATE cluster SET schema_version = 1")
    upgrade(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT schema_version FROM cluster").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT count(*) FROM nodes").fetchone() == (0,)


# --- three node processes -------------------------------------------------------------------------

TTL_S = 2.0
TICK_S = TTL_S / 4
BOUND_S = TTL_S + TICK_S + 0.5
"""Takeover after a death or a freeze: within the TTL, one tick and half a second."""


class Nodes:
    """Node processes (tests/events/lease_node.py) on one journal, each run logging to a file
    of its own."""

    def __init__(self, dsn: str, root: Path) -> None:
        self.dsn = dsn
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.runs: list[tuple[str, Path]] = []

    def start(self, name: str, *extra: str) -> None:
        """Start node ``name`` (``extra``: lease_node.py's optional arguments)."""
        log = self.root / f"{name}.{len(self.runs)}"
        self.runs.append((name, log))
        with open(log.with_suffix(".err"), "ab") as err:  # the child keeps its own copy
            self.procs[name] = subprocess.Popen(
                [sys.executable, str(NODE), self.dsn, name, str(TTL_S), str(log), *extra],
                stdin=subprocess.DEVNULL,
                stderr=err,
            )

    @staticmethod
    def read(log: Path) -> list[dict[str, Any]]:
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.endswith("}")]

    def lines(self, name: str) -> list[dict[str, Any]]:
        """The log of ``name``'s current process."""
        return self.read(next(log for n, log in reversed(self.runs) if n == name))

    def owners(self) -> dict[int, str]:
        """Each live lease's node, from the database."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT l.shard, l.node FROM shard_lease l JOIN nodes n ON n.node = l.node "
                "AND n.incarnation = l.incarnation AND n.expires_at > clock_timestamp()"
            ).fetchall()
        return {int(s): str(n) for s, n in rows}

    def wait(self, what: str, ready: Callable[[], bool], timeout: float = 30.0) -> None:
        limit = time.monotonic() + timeout
        while not ready():
            for name, proc in self.procs.items():
                if proc.poll() not in (None, 0, -signal.SIGKILL):
                    log = next(log for n, log in reversed(self.runs) if n == name)
                    raise AssertionError(f"{name}: {log.with_suffix('.err').read_text()}")
            assert time.monotonic() < limit, f"not within {timeout} s: {what}"
            time.sleep(0.05)

    def acquired_after(self, shards: set[int], since: float) -> dict[int, float]:
        """When each of ``shards`` was first acquired after ``since`` (monotonic), by anyone."""
        found: dict[int, float] = {}
        for _, log in self.runs:
            for line in self.read(log):
                if line["change"] == "acquired" and line["at"] > since and line["shard"] in shards:
                    found[line["shard"]] = min(found.get(line["shard"], line["at"]), line["at"])
        return found

    def taken_over(self, shards: set[int], since: float) -> Callable[[], bool]:
        return lambda: len(self.acquired_after(shards, since)) == len(shards)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def nodes(dsn: str, tmp_path: Path) -> Iterator[Nodes]:
    group = Nodes(dsn, tmp_path)
    try:
        yield group
    finally:
        group.close()


def beliefs(
    lines: list[dict[str, Any]], end: float, key: str = "shard"
) -> list[tuple[Any, float, float, int]]:
    """From one node's log, each (shard, from, to, token) it believed it owned: from its
    ``acquired`` to the first of its release, fence or lapse, the deadline its last renewal set
    (a frozen or dead node believes nothing past it), or ``end``. ``key="singleton"``: the same
    of the named singletons it held."""
    held: dict[Any, tuple[float, int]] = {}
    deadline = float("inf")
    spans: list[tuple[Any, float, float, int]] = []
    for line in lines:
        kind = line["change"]
        if kind == "renewed":
            if line["at"] > deadline:  # came after the deadline: everything held ended there
                spans += [(s, t0, deadline, tok) for s, (t0, tok) in held.items()]
                held = {}
            deadline = line["deadline"]
        elif line.get(key) is None:
            continue
        elif kind == "acquired":
            held[line[key]] = (line["at"], line["token"])
        elif kind in ("released", "fenced", "lapsed") and line[key] in held:
            t0, tok = held.pop(line[key])
            spans.append((line[key], t0, min(line["at"], deadline), tok))
    spans += [(s, t0, min(end, deadline), tok) for s, (t0, tok) in held.items()]
    return spans


def test_three_nodes_kill_freeze_restart_and_drain(nodes: Nodes) -> None:
    """SIGKILL one, restart it, SIGSTOP another past its TTL, drain the third: each takeover
    within TTL + one tick + 0.5 s, never two nodes believing they own one shard at once, the
    frozen node's old tokens refused when it wakes, nothing recorded by it after its lease
    lapsed on the database clock, and a drain handing over before any TTL passes."""
    for name in "abc":
        nodes.start(name)
    nodes.wait(
        "every shard owned, each node holding some",
        lambda: len(nodes.owners()) == SHARDS and set(nodes.owners().values()) == set("abc"),
    )

    # SIGKILL a: b and c take its shards over once its row lapses.
    lost = {s for s, n in nodes.owners().items() if n == "a"}
    killed = time.monotonic()
    nodes.procs["a"].kill()
    nodes.procs["a"].wait()
    nodes.wait("a's shards taken over", nodes.taken_over(lost, killed))
    took = max(nodes.acquired_after(lost, killed).values()) - killed
    assert took <= BOUND_S, f"takeover after SIGKILL took {took:.2f} s"

    # Restart a: after its ready ticks it is handed shards, one per tick.
    nodes.start("a")
    nodes.wait("a handed shards again", lambda: "a" in nodes.owners().values())

    # SIGSTOP b past its TTL: a and c take its shards; woken, b's old tokens are refused.
    frozen = {s for s, n in nodes.owners().items() if n == "b"}
    assert frozen
    b = nodes.procs["b"]
    stopped = time.monotonic()
    b.send_signal(signal.SIGSTOP)
    incarnation = [x for x in nodes.lines("b") if x["change"] == "renewed"][-1]["incarnation"]
    nodes.wait("b's shards taken over", nodes.taken_over(frozen, stopped))
    took = max(nodes.acquired_after(frozen, stopped).values()) - stopped
    assert took <= BOUND_S, f"takeover after SIGSTOP took {took:.2f} s"
    time.sleep(0.5)
    b.send_signal(signal.SIGCONT)
    nodes.wait(
        "b registered again",
        lambda: any(
            x["change"] == "renewed" and x["incarnation"] > incarnation for x in nodes.lines("b")
        ),
    )
    b.send_signal(signal.SIGUSR1)
    nodes.wait(
        "b tried its old tokens",
        lambda: any(x["change"] == "zombie" and x["shard"] in frozen for x in nodes.lines("b")),
    )
    time.sleep(0.5)
    zombie = [x for x in nodes.lines("b") if x["change"] == "zombie"]
    assert {x["outcome"] for x in zombie} == {FENCED}, zombie

    # Drain c: its shards move on the others' next tick, long before a TTL.
    nodes.wait("c owns some", lambda: "c" in nodes.owners().values())
    drained = time.monotonic()
    nodes.procs["c"].send_signal(signal.SIGTERM)
    assert nodes.procs["c"].wait(20) == 0
    handed = {
        x["shard"] for x in nodes.lines("c") if x["change"] == "released" and x["reason"] == "drain"
    }
    assert handed
    nodes.wait("c's shards taken over", nodes.taken_over(handed, drained))
    took = max(nodes.acquired_after(handed, drained).values()) - drained
    assert took < TTL_S, f"handover on drain took {took:.2f} s"
    end = time.monotonic()
    nodes.close()

    # No two nodes ever believed they owned one shard at once (one monotonic clock: one host).
    spans: list[tuple[int, float, float, int]] = []
    for _, log in nodes.runs:
        spans += beliefs(nodes.read(log), killed if log == nodes.runs[0][1] else end)
    assert nodes.runs[0][0] == "a"
    for shard in range(SHARDS):
        held = sorted((t0, t1, token) for s, t0, t1, token in spans if s == shard)
        assert held, f"shard {shard} never owned"
        for (_, end0, token0), (start1, _, token1) in itertools.pairwise(held):
            assert end0 <= start1, f"shard {shard}: two owners at once"
            assert token1 > token0

    # Nothing b recorded before the freeze is later than its lease on the database clock.
    expiry = max(
        x["expires_at_ms"]
        for x in nodes.lines("b")
        if x["change"] == "renewed" and x["incarnation"] == incarnation
    )
    with psycopg.connect(nodes.dsn, autocommit=True) as conn:
        recorded = conn.execute(
            "SELECT max(recorded_at_ms), count(*) FROM events WHERE principal = %s",
            (f"node:b:{incarnation}",),
        ).fetchone()
        zombies = conn.execute(
            "SELECT count(*) FROM events WHERE principal LIKE 'zombie:%'"
        ).fetchone()
    assert recorded is not None and recorded[1] > 0 and recorded[0] <= expiry
    assert zombies == (0,)
    assert verify_database(nodes.dsn).ok
