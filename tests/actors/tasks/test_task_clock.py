"""Task leases decided on the database's clock (issue 24 step 5): a node of a cluster whose own
clock runs ahead (a real process, tests/actors/tasks/clock_node.py) reclaims another node's
lapsed claim no earlier than the claim's lease ends, as the database's clock tells it.

The node's clock is moved two ways: under libfaketime, 5 s ahead (issue 24's case; the whole
process's ``CLOCK_REALTIME``, every library's reads of it included: tests/faketime.py), and by
the node itself, 60 s ahead (``time.time`` and ``time.time_ns``, where reel reads it).

The claim is made the way a node that then died would make it (the task store's own
``enqueue`` and ``write``, on the database's clock), the node whose clock is ahead takes every
shard, folds the task and reclaims it. Every time compared is the database's: the claim's
``lease_until_ms`` and the ``recorded_at_ms`` ``shard_append`` stamps the reclaim with."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import psycopg

from actors.tasks.decide import claimed
from actors.tasks.store import enqueue, load_task, write
from events.envelope import StoredEvent
from events.postgres.database import initialise
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseKeeper, LeaseSettings
from events.postgres.reader import PostgresReader
from events.task_lifecycle import task_stream
from tests.faketime import shifted
from tests.postgres_server import PostgresServer

NODE = Path(__file__).with_name("clock_node.py")
AHEAD_S = 60
"""How far ahead the node moves its own wall clock."""
FAKETIME_S = 5
"""How far ahead libfaketime moves the node's wall clock."""
LEASE_MS = 10_000
"""The dead node's claim. A node on its own clock, AHEAD_S ahead, finds it lapsed the moment
it starts (its start takes far less than this), so its reclaim comes early by the rest; one
FAKETIME_S ahead finds it lapsed FAKETIME_S early (its start takes less than that too)."""
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


def dead_claim(dsn: str, lease_ms: int) -> tuple[str, int]:
    """A task enqueued and claimed for ``lease_ms`` the way a node that then died would (the
    task store's own ``enqueue`` and ``write``, on the database's clock): its id and its
    claim's ``lease_until_ms``."""
    journal = PostgresJournal(dsn)
    try:
        ticket, state = enqueue(
            journal, "noop", {}, principal="user:alice", clock=lambda: database_ms(dsn)
        )
        assert state is not None
        state = write(
            journal,
            state,
            lambda s: claimed(s, database_ms(dsn), "dead.1", lease_ms),
            principal="node",
        )
    finally:
        journal.close()
    assert state.lease_until_ms is not None
    return ticket.task_id, state.lease_until_ms


def task_rows(dsn: str, task_id: str, running: Callable[[], object]) -> list[StoredEvent]:
    """The task's stream once the task has ended (``running`` asserts the node still runs)."""
    reader = PostgresReader(dsn)
    try:
        limit = time.monotonic() + DEADLINE_S
        while (done := load_task(reader, task_id)) is None or not done.status.terminal:
            running()
            assert time.monotonic() < limit, f"task not done: {done}"
            time.sleep(0.1)
        return reader.read_stream(task_stream(task_id))
    finally:
        reader.close()


def reclaim(
    postgres: PostgresServer, tmp_path: Path, *extra: str, faketime_s: int | None = None
) -> Reclaimed:
    """A claim by a node that died, then the node whose clock is ahead, until the task ends:
    ``faketime_s`` ahead under libfaketime, else AHEAD_S ahead by its own hand."""
    env = None if faketime_s is None else shifted(faketime_s)
    ahead_s = AHEAD_S if faketime_s is None else 0
    dsn = postgres.database()
    initialise(dsn, 2)
    task_id, lease_until_ms = dead_claim(dsn, LEASE_MS)

    log = tmp_path / "clocks.json"
    with open(tmp_path / "node.err", "wb") as err:
        node = subprocess.Popen(
            [sys.executable, str(NODE), dsn, "b", str(log), str(ahead_s), *extra],
            stdin=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )

    def running() -> None:
        assert node.poll() is None, (tmp_path / "node.err").read_text()

    try:
        rows = task_rows(dsn, task_id, running)
    finally:
        node.terminate()
        node.wait(30)
    clocks = json.loads(log.read_text())
    claims = [r for r in rows if r.kind == "task.claimed"]
    assert len(claims) == 2, [r.kind for r in rows]
    return Reclaimed(
        lease_until_ms=lease_until_ms,
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


def test_under_faketime_a_node_whose_clock_is_ahead_reclaims_no_claim_early(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    got = reclaim(postgres, tmp_path, faketime_s=FAKETIME_S)
    assert got.ahead_ms >= (FAKETIME_S - 1) * 1000  # the preload took: the clock moved
    assert got.reclaimed_at_ms >= got.lease_until_ms, (
        f"reclaimed {got.lease_until_ms - got.reclaimed_at_ms} ms before the lease ended"
    )
    assert got.kinds.count("task.succeeded") == 1


def test_under_faketime_on_its_own_wall_clock_the_same_node_reclaims_early(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    """The test above's control: libfaketime's clock is the one a wall-clock queue reads."""
    got = reclaim(postgres, tmp_path, "--wall", faketime_s=FAKETIME_S)
    assert got.ahead_ms >= (FAKETIME_S - 1) * 1000
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
