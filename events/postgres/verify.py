"""``reel journal verify --dsn``: walk every shard chain of a PostgreSQL journal.

Per shard, in ``shard_pos`` order: positions dense from 1, each row linking to the one before
it, its hash recomputed in Python (:func:`events.chain.shard_identity`, so a fault in the SQL
that computed it shows here too), the payload against its stored digest (to tell a payload edit
from an envelope edit), and the last row against ``shard_head``. Then the global positions:
dense from 1 across the shards. No signatures yet: super-checkpoints, a witness and a roster of
node keys are step 4 of issue 24, so this proves the chains are whole, not who wrote them
(docs/scale-out.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from events.chain import GENESIS, payload_digest, row_hash, shard_identity
from events.envelope import Head
from events.postgres.database import connect, failures, shard_count
from events.postgres.reader import COLUMNS, to_event
from events.sqlite.verify import Fault, VerifyReport

BATCH = 20_000
_HEADS = "SELECT shard, pos, hash FROM shard_head ORDER BY shard"
_BOUNDS = "SELECT coalesce(min(position), 0), coalesce(max(position), 0), count(*) FROM events"
Rows = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


class _Found(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def verify_database(dsn: str) -> VerifyReport:
    """Verify the journal in the database ``dsn`` names; never raises for tampering (the report
    carries the first fault). Raises :class:`events.JournalUnavailable` when it cannot read.

    The whole walk reads one snapshot (a read-only repeatable-read transaction, which takes no
    transaction id and so holds no horizon): rows a node appends meanwhile are not half seen."""
    started = time.perf_counter()
    events = 0
    fault: Fault | None = None
    with connect(dsn, autocommit=False) as conn, failures(dsn, "cannot verify"):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        shards = shard_count(conn, dsn)

        def rows(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        heads = {int(s): Head(int(p), bytes(h)) for s, p, h in rows(_HEADS)}
        try:
            for shard in range(shards):
                events += _walk(rows, shards, shard, heads.get(shard))
            low, high, count = rows(_BOUNDS)[0]
            if count and (low, high) != (1, count):
                raise _Found(
                    Fault(
                        kind="deleted_row",
                        position=int(high),
                        message=f"global positions are not dense: {count} rows span {low}..{high}",
                    )
                )
        except _Found as found:
            fault = found.fault
        last = rows("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
        head = Head(int(last[0][0]), bytes(last[0][1])) if last else Head(0, GENESIS)
        conn.rollback()
    return VerifyReport(
        ok=fault is None,
        events=events,
        head_position=head.position,
        head_hash=head.hash.hex(),
        checkpoints=0,
        last_checkpoint_position=0,
        key_trusted=False,
        elapsed_s=time.perf_counter() - started,
        fault=fault,
    )


def _walk(rows: Rows, shards: int, shard: int, recorded: Head | None) -> int:
    pos, prev = 0, GENESIS
    while True:
        batch = rows(
            f"SELECT {COLUMNS}, payload_sha256 FROM events WHERE shard = %s AND shard_pos > %s "
            "ORDER BY shard_pos LIMIT %s",
            (shard, pos, BATCH),
        )
        for row in batch:
            e = to_event(row[:-1])
            where = f"shard {shard} row {e.shard_pos} (position {e.position})"
            if e.shard_pos != pos + 1:
                raise _Found(
                    Fault(
                        kind="deleted_row",
                        position=e.position,
                        message=f"{where}: expected {pos + 1}",
                    )
                )
            if e.prev_hash != prev:
                raise _Found(
                    Fault(
                        kind="rewritten_chain",
                        position=e.position,
                        message=f"{where} does not link to the row before it in its shard",
                    )
                )
            identity = shard_identity(
                shards,
                shard,
                e.shard_pos,
                e.event_id,
                e.stream,
                e.stream_seq,
                e.kind,
                e.version,
                e.recorded_at_ms,
                e.principal,
                e.correlation_id,
                e.causation_id,
            )
            if row_hash(prev, identity, e.payload) != e.hash:
                altered = payload_digest(e.payload) != bytes(row[-1])
                raise _Found(
                    Fault(
                        kind="altered_payload" if altered else "altered_envelope",
                        position=e.position,
                        message=f"{where}: its {'payload' if altered else 'envelope'} was altered",
                    )
                )
            pos, prev = e.shard_pos, e.hash
        if len(batch) < BATCH:
            break
    if recorded is None or (recorded.position, recorded.hash) != (pos, prev):
        raise _Found(
            Fault(
                kind="truncated_tail",
                position=pos,
                message=f"shard {shard}: its head records "
                f"{recorded.position if recorded is not None else 'nothing'}, its chain ends at "
                f"{pos}",
            )
        )
    return pos


def verify_shard(conn: Any, shards: int, shard: int) -> Fault | None:
    """Walk one shard's chain on ``conn`` (the walk :func:`verify_database` does for each
    shard, against its ``shard_head``): the first fault, or ``None``. A node runs it on every
    shard it acquires before it appends to it (:mod:`events.postgres.leases`)."""

    def rows(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(conn.execute(sql, args).fetchall())

    head = rows("SELECT pos, hash FROM shard_head WHERE shard = %s", (shard,))
    try:
        _walk(rows, shards, shard, Head(int(head[0][0]), bytes(head[0][1])) if head else None)
    except _Found as found:
        return found.fault
    return None
