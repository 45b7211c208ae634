"""``shard_append`` called straight on the database, past the journal and its own fence: what a
writer that missed its fencing (a stale token, a lapsed lease) would send. The fencing tests and
the lease nodes (tests/events/lease_node.py) use it to show the database itself refuses it."""

from __future__ import annotations

import psycopg


def raw_append(
    dsn: str, shard: int, token: int, *, stream: str = "zombie", principal: str = "system"
) -> None:
    """One ``run.output`` row for ``stream`` in ``shard`` under ``token``; raises
    :class:`psycopg.Error` (its ``sqlstate`` says why) when the database refuses it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
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
                [None],
                ["01J"],
                ["run.output"],
                [1],
                [b"\x80"],
            ),
        ).fetchall()
