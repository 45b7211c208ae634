"""Task leases decided on the database's clock (issue 24 step 5): a node of a cluster whose own
clock runs ahead (a real process, tests/actors/tasks/clock_node.py) reclaims another node's
lapsed claim no earlier than the claim's lease ends, as the database's clock tells it.

The claim is made the way a node that then died would make it (the task store's own
``enqueue`` and ``write``, on the database's clock), the node whose clock is ahead takes every
shard, folds the task and reclaims it. Every time compared is the database's: the claim's
``lease_until_ms`` and the ``recorded_at_ms`` ``shard_append`` stamps the reclaim with."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import psycopg

from actors.tasks.decide import claimed
from actors.tasks.store import enqueue, load_task, write
from events.postgres.database import initialise
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseKeeper, LeaseSettings
from events.postgres.reader import PostgresReader
from events.task_lifecycle import task_stream
from tests.postgres_server import PostgresServer

NODE = Path(__file__).with_name("clock_node.py")
AHEAD_S = 60
"""How far ahead the node's wall clock runs."""
LEASE_MS = 10_000
"""The dead node's claim. A node on its own clock, AHEAD_S ahead, finds it lapsed the moment
it starts (its start takes far less than this), so its reclaim comes early by the rest."""
DEADLINE_S = 60.0


def database_ms(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        (now,) = row.fetchone() or (0,)
    return int(now)


class Reclaimed(NamedTuple):
    lease_until_ms: int
    """The dead node's claim's lease end (the database's clock)."""
    reclaimed_at_ms: int
    """When ``shard_append`` recorded the reclaim (the database's clock)."""
    ahead_ms: int
    """How far ahead of the database's clock the node's own clock was."""
    kinds: list[str]


def reclaim(postgres: PostgresServer, tmp_path: Path, *extra: str) -> Reclaimed:
    """A claim by a node that died, then the node whose clock is ahead, until the task ends."""
    dsn = postgres.database()
    initialise(dsn, 2)
    journal = PostgresJournal(dsn)  # the node that claims the task, then dies
    try:
        ticket, state = enqueue(
            journal, "noop", {}, principal="user:alice", clock=lambda: database_ms(dsn)
        )
        assert state is not None
        state = write(
            journal,
            state,
            lambda s: claimed(s, database_ms(dsn), "dead.1", LEASE_MS),
            principal="node",
        )
    finally:
        journal.close()
    assert state.lease_until_ms is not None

    log = tmp_path / "clocks.json"
    with open(tmp_path / "node.err", "wb") as err:
        node = subprocess.Popen(
            [sys.executable, str(NODE), dsn, "b", str(log), str(AHEAD_S), *extra],
            stdin=subprocess.DEVNULL,
            stderr=err,
        )
    reader = PostgresReader(dsn)
    try:
        limit = time.monotonic() + DEADLINE_S
        while (done := load_task(reader, ticket.task_id)) is None or not done.status.terminal:
            assert node.poll() is None, (tmp_path / "node.err").read_text()
            assert time.monotonic() < limit, f"task not done: {done}"
            time.sleep(0.1)
        rows = reader.read_stream(task_stream(ticket.task_id))
    finally:
        reader.close()
        node.terminate()
        node.wait(30)
    clocks = json.loads(log.read_text())
    claims = [r for r in rows if r.kind == "task.claimed"]
    assert len(claims) == 2, [r.kind for r in rows]
    return Reclaimed(
        lease_until_ms=state.lease_until_ms,
        reclaimed_at_ms=claims[1].recorded_at_ms,
        ahead_ms=clocks["wall_ms"] - clocks["db_ms"],
        kinds=[r.kind for r in rows],
    )


def test_a_node_whose_clock_is_ahead_reclaims_no_claim_early(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    got = reclaim(postgres, tmp_path)
    assert got.ahead_ms >= (AHEAD_S - 1) * 1000
    assert got.reclaimed_at_ms >= got.lease_until_ms, (
        f"reclaimed {got.lease_until_ms - got.reclaimed_at_ms} ms before the lease ended"
    )
    assert got.kinds.count("task.succeeded") == 1


def test_on_its_own_wall_clock_the_same_node_reclaims_early(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """What the test above would see were the queue on the node's wall clock (as a lone node's
    is, rightly): the claim reclaimed while its lease still ran."""
    got = reclaim(postgres, tmp_path, "--wall")
    assert got.ahead_ms >= (AHEAD_S - 1) * 1000
    assert got.reclaimed_at_ms < got.lease_until_ms


def test_the_lease_keepers_database_clock_is_never_ahead_of_the_database(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.database()
    initialise(dsn, 2)
    keeper = LeaseKeeper(dsn, "a", settings=LeaseSettings(ttl_s=2.0, ready_ticks=0))
    keeper.register()
    try:
        before = keeper.database_ms()  # no renewal yet: asked of the database
        assert before <= database_ms(dsn)
        keeper.tick()
        for _ in range(20):  # the renewal's stamp, moved on by the monotonic clock
            ours = keeper.database_ms()
            assert before <= ours <= database_ms(dsn) + 1  # (+1: the database rounds to ms)
            time.sleep(0.01)
    finally:
        keeper.stop()
