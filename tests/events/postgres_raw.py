"""``shard_append`` called straight on the database, past the journal and its own fence: what a
writer that missed its fencing (a stale token, a lapsed lease) would send. The fencing tests and
the lease nodes (tests/events/lease_node.py) use it to show the database itself refuses it."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg


def raw_append(
    dsn: str,
    shard: int,
    token: int,
    *,
    stream: str = "zombie",
    principal: str = "system",
    key: str | None = None,
    conn: psycopg.Connection[Any] | None = None,
) -> tuple[str, int]:
    """One ``run.output`` row for ``stream`` in ``shard`` under ``token`` (with idempotency
    key ``key``), on ``conn`` when given (its transaction, left open) else on a connection of
    its own: its outcome (``ok``, ``conflict``, ``misplaced``, ``duplicate``) and first seq (for
    ``misplaced``: the stream's shard); raises :class:`psycopg.Error` (its ``sqlstate`` says
    why) when the database refuses it."""
    with contextlib.ExitStack() as stack:
        if conn is None:
            conn = stack.enter_context(psycopg.connect(dsn, autocommit=True))
        row = conn.execute(
            "SELECT * FROM shard_append(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                shard,
                token,
                [stream],
                [1],
                [None],
                [principal],
                [None],
                [None],
                [key],
                ["01J"],
                ["run.output"],
                [1],
                [b"\x80"],
            ),
        ).fetchone()
    assert row is not None
    return str(row[1]), int(row[4])


def rewrite_shard(dsn: str, shard: int, payload: bytes, at: int = 1) -> None:
    """The attack super-checkpoints exist for: ``shard``'s chain rewritten consistently,
    straight in the database: the payload of its row ``at`` replaced, every hash from there
    recomputed (the format is public), ``shard_head`` moved to the new head. Every link and
    hash of the shard then checks out."""
    from events.chain import GENESIS, payload_digest, row_hash, stored_identity
    from events.postgres.reader import COLUMNS, to_event

    with psycopg.connect(dsn, autocommit=True) as conn:
        (shards,) = conn.execute("SELECT shards FROM cluster").fetchone() or (0,)
        rows = conn.execute(
            f"SELECT {COLUMNS} FROM events WHERE shard = %s ORDER BY shard_pos", (shard,)
        ).fetchall()
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        prev = GENESIS
        for row in rows:
            e = to_event(row)
            stored = payload if e.shard_pos == at else e.payload
            identity = stored_identity(shards, e)
            digest = row_hash(prev, identity, stored)
            conn.execute(
                "UPDATE events SET payload = %s, payload_sha256 = %s, prev_hash = %s, hash = %s "
                "WHERE shard = %s AND shard_pos = %s",
                (stored, payload_digest(stored), prev, digest, shard, e.shard_pos),
            )
            prev = digest
        conn.execute("UPDATE shard_head SET hash = %s WHERE shard = %s", (prev, shard))
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")


def delete_last_row(dsn: str, shard: int) -> None:
    """Delete ``shard``'s last row and cover the tracks: the global positions after it moved
    down one (they are outside the v3 hash), the shard's head and the global head moved back.
    Every link, hash and position then checks out."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        row = conn.execute(
            "DELETE FROM events WHERE shard = %s AND shard_pos = "
            "(SELECT max(shard_pos) FROM events WHERE shard = %s) RETURNING position, prev_hash",
            (shard, shard),
        ).fetchone()
        assert row is not None, f"shard {shard} is empty"
        position, prev_hash = row
        conn.execute("UPDATE events SET position = -position WHERE position > %s", (position,))
        conn.execute("UPDATE events SET position = -position - 1 WHERE position < 0")
        conn.execute(
            "UPDATE shard_head SET pos = pos - 1, hash = %s WHERE shard = %s", (prev_hash, shard)
        )
        conn.execute("UPDATE log_head SET position = position - 1")
        conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
