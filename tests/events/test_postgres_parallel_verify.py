"""``verify_database`` walks the shard chains on several connections at once (issue 24 step 4,
SCALE-OUT.md "Integrity"; events/postgres/verify.py): the report is the one a walk of shard
after shard gives, whatever walk finds a fault first; a fault in a late shard is found though
the early ones are fine; a fault, or an error, stops the walks above it before their next
batch and starts no other; every walk reads the one snapshot the verification took.

The faults are made with raw SQL (a payload edited in place, the append-only trigger off). How
far each walk got is seen by wrapping ``verify._walk``'s batch reads: the walks of sound shards
are held at their second batch until the faulty (or failing) shard's walk has ended, so what
they do next does not depend on the threads' timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from events import JournalUnavailable
from events.catalog import RunOutput
from events.codec import encode
from events.postgres import database, verify
from events.postgres.database import initialise
from events.postgres.homes import shard_of
from events.postgres.journal import PostgresJournal
from events.postgres.verify import verify_database
from tests.postgres_server import PostgresServer

SHARDS = 16
STREAMS = 64
EACH = 3
HOLD_S = 30.0
"""The longest a held walk waits for the first shard's walk to end (it ends in milliseconds)."""


def out(text: str) -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


@pytest.fixture
def journal(postgres: PostgresServer) -> Iterator[PostgresJournal]:
    """A lone writer's journal of 16 shards with ``EACH`` rows or more in every shard, open."""
    dsn = postgres.database()
    assert initialise(dsn, SHARDS)
    names = [f"run/{i}" for i in range(STREAMS)]
    assert {shard_of(s, SHARDS) for s in names} == set(range(SHARDS))
    journal = PostgresJournal(dsn)
    try:
        for name in names:
            journal.append(name, [out(f"{name}.{i}") for i in range(EACH)], expected_seq=0)
        yield journal
    finally:
        journal.close()


def alter_payload(dsn: str, shard: int, at: int) -> int:
    """Edit the payload of ``shard``'s row ``at`` in place (no hash recomputed): its position."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        row = conn.execute(
            "UPDATE events SET payload = %s WHERE shard = %s AND shard_pos = %s RETURNING position",
            (encode(out("forged")), shard, at),
        ).fetchone()
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    assert row is not None, f"shard {shard} has no row {at}"
    return int(row[0])


def last_pos(dsn: str, shard: int) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pos FROM shard_head WHERE shard = %s", (shard,)).fetchone()
    assert row is not None
    return int(row[0])


class Walks:
    """Wraps ``verify._walk`` to count each shard's batches read and to order the walks:
    ``first``'s walk reads its first batch once ``beside`` other walks have read one each, and
    the other walks wait at their second batch until the verification has taken in how
    ``first``'s walk ended (a fault: its shard the lowest faulty one; an error: every walk told
    to stop; or its end)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, first: int, beside: int = 0) -> None:
        self.batches: dict[int, int] = {}
        self.lock = threading.Lock()
        self.on_first: Any = None
        """Called with ``first``'s batch reader before its first batch."""
        made: list[verify._Walks] = []
        ended = threading.Event()
        limit = time.monotonic() + HOLD_S

        class Recorded(verify._Walks):
            def __init__(self, *args: Any) -> None:
                super().__init__(*args)
                made.append(self)

        def until(condition: Callable[[], bool], what: str) -> None:
            while not condition():
                assert time.monotonic() < limit, what
                time.sleep(0.001)

        def others() -> int:
            with self.lock:
                return sum(1 for s, n in self.batches.items() if s != first and n)

        def settled() -> bool:
            return made[0].bound == first or made[0].stopped or ended.is_set()

        original = verify._walk

        def walk(rows: verify.Rows, shards: int, shard: int, *args: Any, **kw: Any) -> int:
            if shard < 0:
                return original(rows, shards, shard, *args, **kw)

            def counted(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
                with self.lock:
                    n = self.batches.setdefault(shard, 0)
                if shard == first and n == 0:
                    until(lambda: others() >= beside, f"{beside} walks beside shard {first}")
                    if self.on_first is not None:
                        self.on_first(rows)
                if shard != first and n >= 1:
                    until(settled, f"shard {first}'s walk never ended")
                batch = rows(sql, params)
                with self.lock:
                    self.batches[shard] += 1
                return batch

            length = original(counted, shards, shard, *args, **kw)
            if shard == first:
                ended.set()
            return length

        monkeypatch.setattr(verify, "_Walks", Recorded)
        monkeypatch.setattr(verify, "_walk", walk)
        monkeypatch.setattr(verify, "BATCH", 1)  # a walk of EACH rows takes EACH + 1 batches


def test_a_fault_in_a_late_shard_is_found_when_the_early_ones_are_fine(
    journal: PostgresJournal,
) -> None:
    late = SHARDS - 2
    position = alter_payload(journal.dsn, late, last_pos(journal.dsn, late))
    sequential = verify_database(journal.dsn, workers=1)
    assert sequential.fault is not None
    assert (sequential.fault.kind, sequential.fault.position) == ("altered_payload", position)
    assert f"shard {late} row" in sequential.fault.message
    for workers in (2, 4, SHARDS, 64):
        report = verify_database(journal.dsn, workers=workers)
        assert report.fault == sequential.fault, workers
        assert report.events == sequential.events  # the rows of the shards before it
        assert (report.ok, report.head_position) == (False, sequential.head_position)


def test_the_lowest_shards_fault_is_reported_whichever_walk_finds_one_first(
    journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shard 3's fault is at its last row, far into its walk; shards 9 and 14 fail at their
    first. The report names shard 3's, as the walk of shard after shard does, every time."""
    dsn = journal.dsn
    low = alter_payload(dsn, 3, last_pos(dsn, 3))
    alter_payload(dsn, 9, 1)
    alter_payload(dsn, 14, 1)
    monkeypatch.setattr(verify, "BATCH", 1)
    sequential = verify_database(dsn, workers=1)
    assert sequential.fault is not None and sequential.fault.position == low
    for _ in range(5):
        for workers in (4, SHARDS):
            report = verify_database(dsn, workers=workers)
            assert (report.fault, report.events) == (sequential.fault, sequential.events)


def test_a_fault_stops_the_walks_above_it_and_starts_no_other(
    journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    alter_payload(journal.dsn, 0, 1)
    walks = Walks(monkeypatch, first=0, beside=3)
    report = verify_database(journal.dsn, workers=4)
    assert report.fault is not None and "shard 0 row 1" in report.fault.message
    # Shards 1-3 were walked beside it, one batch each; none after; shards 4-15 never started.
    assert walks.batches == {0: 1, 1: 1, 2: 1, 3: 1}


def test_the_walks_below_a_fault_go_on_to_their_end(
    journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault in shard 2 stops shard 3's walk, but shards 0 and 1 may hold a lower one: they
    are walked to their ends (and are sound: shard 2's fault is the report)."""
    dsn = journal.dsn
    position = alter_payload(dsn, 2, 1)
    walks = Walks(monkeypatch, first=2, beside=3)
    report = verify_database(dsn, workers=4)
    assert report.fault is not None and report.fault.position == position
    assert walks.batches[0] == last_pos(dsn, 0) + 1
    assert walks.batches[1] == last_pos(dsn, 1) + 1
    assert walks.batches[3] == 1
    assert set(walks.batches) == {0, 1, 2, 3}


def test_a_walk_that_loses_its_connection_stops_every_walk_and_leaves_nothing_open(
    journal: PostgresJournal, postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server ends one walk's connection (as a restart or an administrator would): the
    verification raises JournalUnavailable; the other walks stop before their next batch, and
    no thread or connection of it is left behind."""

    def terminate(rows: verify.Rows) -> None:
        ((pid,),) = rows("SELECT pg_backend_pid()", ())
        with psycopg.connect(postgres.dsn(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def backends() -> int:
        with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
            ).fetchone()
        assert row is not None
        return int(row[0])

    walks = Walks(monkeypatch, first=1, beside=3)
    walks.on_first = terminate
    threads, connections = threading.active_count(), backends()
    with pytest.raises(JournalUnavailable, match="cannot verify the journal database"):
        verify_database(journal.dsn, workers=4)
    assert walks.batches == {0: 1, 2: 1, 3: 1, 1: 0}
    assert threading.active_count() == threads
    limit = time.monotonic() + HOLD_S  # a closed connection's backend ends just after
    while backends() != connections:
        assert time.monotonic() < limit, f"{backends()} backends, {connections} before"
        time.sleep(0.01)
    monkeypatch.undo()
    assert verify_database(journal.dsn, workers=4).ok  # nothing was wrong with the journal


def test_every_walk_reads_the_snapshot_the_verification_took(
    journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows appended to every shard while the walks run are not seen by any of them: the
    report covers the journal as it was when verification began, and it verifies."""
    before = journal.head()
    walks = Walks(monkeypatch, first=0)
    walks.on_first = lambda rows: [
        journal.append(f"run/{i}", [out("later")], expected_seq=EACH) for i in range(STREAMS)
    ]
    report = verify_database(journal.dsn, workers=SHARDS)
    assert report.ok, report.fault
    assert (report.events, report.head_position) == (before.position, before.position)
    assert journal.head().position == before.position + STREAMS
    assert verify_database(journal.dsn).events == before.position + STREAMS


def test_without_a_connection_to_spare_the_verification_walks_on_fewer(
    journal: PostgresJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server at its connection limit refuses the extra walks' connections: the walks that
    have one do every shard (the same report), where a node's start must not fail for it."""
    opened: list[str] = []

    def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
        opened.append(dsn)
        if len(opened) > 1:  # the verification's own connection is the first
            raise JournalUnavailable("cannot use the journal database: too many clients")
        return database.connect(dsn, autocommit=autocommit)

    position = alter_payload(journal.dsn, SHARDS - 1, 1)
    monkeypatch.setattr(verify, "connect", connect)
    report = verify_database(journal.dsn, workers=4)
    assert len(opened) == 4
    assert report.fault is not None and report.fault.position == position
    assert report.events == journal.head().position - last_pos(journal.dsn, SHARDS - 1)
