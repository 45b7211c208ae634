"""Reading the PostgreSQL journal: the port's reads by position, plus the horizon reader.

Positions are global and dense from 1 in commit order in step 1 (``shard_append`` takes them
under the ``log_head`` row lock), so every reader of reel pages by position exactly as on
SQLite. :meth:`PostgresReader.horizon` is the order several nodes will fold in (SCALE-OUT.md,
"Reading"): log keys ``(xid, shard, shard_pos)`` below ``pg_snapshot_xmin(pg_current_snapshot())``,
the oldest transaction still open, so a row committed later can never sort before one already
read. Connections come from a psycopg-pool pool, borrowed per query. Rows come in binary
(the server sends ``bytea`` as it is and integers as 8 bytes: no hex text to write there and
parse here for each payload and hash), and psycopg prepares a statement it has run a few times.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from psycopg_pool import ConnectionPool

from events.chain import GENESIS
from events.checkpoint import Checkpoint
from events.envelope import Head, StoredEvent
from events.errors import JournalClosed
from events.postgres.checkpoints import (
    JOINED_KIND,
    LAST_SQL,
    OF_KIND_SQL,
    SUPER_KIND,
    joined,
    stored_checkpoint,
)
from events.postgres.database import connect, failures, safe_dsn, shard_count

COLUMNS = (
    "position, event_id, stream, stream_seq, kind, version, recorded_at_ms, principal, "
    "correlation_id, causation_id, payload, prev_hash, hash, shard, shard_pos"
)
"""The envelope columns, in :class:`StoredEvent` field order."""


POOL_WAIT_S = 5.0
"""How long a read waits for a pooled connection (the database away: every connection is
being opened again) before it is ``JournalUnavailable``, rather than psycopg_pool's 30 s."""


class Member(NamedTuple):
    """A live node of a cluster as its ``nodes`` row shows it (:mod:`events.postgres.leases`)."""

    node: str
    incarnation: int
    address: str
    """``host:port`` of its internal service (empty: it serves none)."""
    public_key: bytes
    """The raw Ed25519 key it signs forwarded commands with."""


_MEMBER = "n.node, n.incarnation, n.address, n.public_key"
_LIVE = "n.expires_at > clock_timestamp()"


def _member(row: tuple[Any, ...]) -> Member:
    return Member(str(row[0]), int(row[1]), str(row[2]), bytes(row[3]))


class LogKey(NamedTuple):
    """Where a row sorts in the horizon order: its transaction id, shard and shard position."""

    xid: int
    shard: int
    shard_pos: int


def to_event(row: tuple[Any, ...]) -> StoredEvent:
    """A :class:`StoredEvent` from a row selected with :data:`COLUMNS`."""
    return StoredEvent(
        position=row[0],
        event_id=row[1],
        stream=row[2],
        stream_seq=row[3],
        kind=row[4],
        version=row[5],
        recorded_at_ms=row[6],
        principal=row[7],
        correlation_id=row[8],
        causation_id=row[9],
        payload=bytes(row[10]),
        prev_hash=bytes(row[11]),
        hash=bytes(row[12]),
        shard=row[13],
        shard_pos=row[14],
    )


class PostgresReader:
    """Reads the journal in the database ``dsn`` names; safe to use from many threads."""

    def __init__(self, dsn: str, *, max_connections: int = 8) -> None:
        self.dsn = dsn
        self.path = safe_dsn(dsn)
        """What messages name the journal by (never the password)."""
        with connect(dsn) as conn:  # fail now, in one line, before the pool retries quietly
            self.shards = shard_count(conn, dsn)
        self._pool = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True},
            name="reel-journal",
            open=False,
        )
        with failures(dsn, "cannot open a pool to"):
            self._pool.open(wait=True, timeout=10)
        self._closed = False

    @classmethod
    def open(cls, dsn: str) -> PostgresReader:
        return cls(dsn)

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self._closed:
            raise JournalClosed(f"journal {self.path} is closed")
        with failures(self.dsn), self._pool.connection(timeout=POOL_WAIT_S) as conn:
            return conn.execute(sql, args, binary=True).fetchall()

    def _events(self, sql: str, args: tuple[Any, ...] = ()) -> list[StoredEvent]:
        return [to_event(row) for row in self._rows(sql, args)]

    def head(self) -> Head:
        rows = self._rows("SELECT position, hash FROM events ORDER BY position DESC LIMIT 1")
        return Head(int(rows[0][0]), bytes(rows[0][1])) if rows else Head(0, GENESIS)

    def read(self, after_position: int = 0, limit: int = 1000) -> list[StoredEvent]:
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE position > %s ORDER BY position LIMIT %s",
            (after_position, limit),
        )

    def read_stream(
        self, stream: str, after_seq: int = -1, limit: int | None = None
    ) -> list[StoredEvent]:
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE stream = %s AND stream_seq > %s "
            "ORDER BY stream_seq LIMIT %s",
            (stream, after_seq, limit),
        )

    def read_correlated(self, correlation_id: str, after_position: int = 0) -> list[StoredEvent]:
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE correlation_id = %s AND position > %s "
            "ORDER BY position",
            (correlation_id, after_position),
        )

    def first_events(self, prefix: str) -> list[StoredEvent]:
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE stream >= %s AND stream < %s "
            "AND stream_seq = 0 ORDER BY position",
            (prefix, prefix + "\U0010ffff"),
        )

    def events_of_kinds(self, kinds: tuple[str, ...], after_position: int = 0) -> list[StoredEvent]:
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE kind = ANY(%s) AND position > %s "
            "ORDER BY position",
            (list(kinds), after_position),
        )

    def open_events(
        self, kind: str, ended_by: tuple[str, ...], key: Literal["stream", "correlation_id"]
    ) -> list[StoredEvent]:
        column = {"stream": "stream", "correlation_id": "correlation_id"}[key]
        return self._events(
            f"SELECT {COLUMNS} FROM events WHERE kind = %s AND {column} IS NOT NULL AND NOT "
            f"EXISTS (SELECT 1 FROM events d WHERE d.kind = ANY(%s) "
            f"AND d.{column} = events.{column}) ORDER BY position",
            (kind, list(ended_by)),
        )

    def stream_next_seq(self, stream: str) -> int:
        rows = self._rows("SELECT max(stream_seq) FROM events WHERE stream = %s", (stream,))
        return 0 if rows[0][0] is None else int(rows[0][0]) + 1

    def checkpoints(self) -> list[Checkpoint]:
        """Every super-checkpoint of the integrity chain, in order (:mod:`events.postgres.
        checkpoints`): ``position`` is the rows it covers, ``row_position`` where it stands."""
        return [stored_checkpoint(row) for row in self._rows(OF_KIND_SQL, (SUPER_KIND,))]

    def last_checkpoint(self) -> Checkpoint | None:
        """The integrity chain's last super-checkpoint, or ``None``."""
        rows = self._rows(LAST_SQL, (SUPER_KIND,))
        return stored_checkpoint(rows[0]) if rows else None

    def roster(self) -> set[bytes]:
        """The public keys of every node that joined (``journal.node_joined`` rows)."""
        return {joined(row).public_key for row in self._rows(OF_KIND_SQL, (JOINED_KIND,))}

    def stream_shard(self, stream: str) -> int | None:
        """The shard ``stream``'s rows are in (fixed by the append that created it), or
        ``None`` while it has none."""
        rows = self._rows(
            "SELECT shard FROM events WHERE stream = %s AND stream_seq = 0", (stream,)
        )
        return int(rows[0][0]) if rows else None

    def shard_owner(self, shard: int) -> Member | None:
        """The live node holding ``shard``'s lease now, or ``None`` while it is free."""
        rows = self._rows(
            f"SELECT {_MEMBER} FROM shard_lease l JOIN nodes n ON n.node = l.node "
            f"AND n.incarnation = l.incarnation AND {_LIVE} WHERE l.shard = %s",
            (shard,),
        )
        return _member(rows[0]) if rows else None

    def singleton_holder(self, name: str) -> Member | None:
        """The live node holding the named singleton ``name`` now, or ``None`` while nobody
        does (never taken, released, or its holder's row lapsed)."""
        rows = self._rows(
            f"SELECT {_MEMBER} FROM singletons s JOIN nodes n ON n.node = s.node "
            f"AND n.incarnation = s.incarnation AND {_LIVE} WHERE s.name = %s",
            (name,),
        )
        return _member(rows[0]) if rows else None

    def member(self, node: str) -> Member | None:
        """``node``'s live row, or ``None`` when no node of that name is live."""
        rows = self._rows(f"SELECT {_MEMBER} FROM nodes n WHERE n.node = %s AND {_LIVE}", (node,))
        return _member(rows[0]) if rows else None

    def horizon(
        self, after: LogKey | None = None, limit: int = 1000
    ) -> list[tuple[LogKey, StoredEvent]]:
        """Up to ``limit`` rows after ``after`` in log-key order, only those below the snapshot
        horizon: every transaction that could still commit a row sorting before them has
        ended. Paging with the last key read misses nothing and repeats nothing; an open write
        transaction anywhere holds the horizon (``idle_in_transaction_session_timeout`` ends
        one that stalls)."""
        start = after or LogKey(0, -1, 0)
        rows = self._rows(
            f"SELECT xid::text::bigint, {COLUMNS} FROM events "
            "WHERE xid < pg_snapshot_xmin(pg_current_snapshot()) "
            "AND (xid, shard, shard_pos) > (%s::text::xid8, %s, %s) "
            "ORDER BY xid, shard, shard_pos LIMIT %s",
            (str(start.xid), start.shard, start.shard_pos, limit),
        )
        return [(LogKey(int(r[0]), int(r[14]), int(r[15])), to_event(r[1:])) for r in rows]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._pool.close()
