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
from typing import Any

from events.chain import GENESIS, payload_digest, row_hash, shard_identity
from events.postgres.reader import COLUMNS, PostgresReader, to_event
from events.sqlite.verify import Fault, VerifyReport

BATCH = 20_000


class _Found(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def verify_database(dsn: str) -> VerifyReport:
    """Verify the journal in the database ``dsn`` names; never raises for tampering (the report
    carries the first fault). Raises :class:`events.JournalUnavailable` when it cannot read."""
    started = time.perf_counter()
    reader = PostgresReader(dsn, max_connections=2)
    events = 0
    fault: Fault | None = None
    try:
        heads = reader.shard_heads()
        for shard in range(reader.shards):
            events += _walk(reader, shard, heads.get(shard))
        low, high, count = reader._rows(
            "SELECT coalesce(min(position), 0), coalesce(max(position), 0), count(*) FROM events"
        )[0]
        if count and (low, high) != (1, count):
            raise _Found(
                Fault(
                    kind="deleted_row",
                    position=int(high),
                    message=f"global positions are not dense: {count} rows span {low}..{high}",
                )
            )
        head = reader.head()
    except _Found as found:
        fault = found.fault
        head = reader.head()
    finally:
        reader.close()
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


def _walk(reader: PostgresReader, shard: int, recorded: Any) -> int:
    pos, prev = 0, GENESIS
    while True:
        rows = reader._rows(
            f"SELECT {COLUMNS}, payload_sha256 FROM events WHERE shard = %s AND shard_pos > %s "
            "ORDER BY shard_pos LIMIT %s",
            (shard, pos, BATCH),
        )
        for row in rows:
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
                reader.shards,
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
        if len(rows) < BATCH:
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
