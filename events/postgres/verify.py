"""``reel journal verify --dsn``: walk every shard chain of a PostgreSQL journal, the integrity
chain's super-checkpoints against them, and a witness's notes against the super-checkpoints.

Per shard, in ``shard_pos`` order (the shards walked on up to :data:`WORKERS` connections at
once, each in the snapshot the verification took; the fault reported is the first in shard
order): positions dense from 1, each row linking to the one before it, its hash recomputed in
Python (:func:`events.chain.shard_identity`, so a fault in the SQL that computed it shows here
too), the payload against its stored digest (to tell a payload edit from an envelope edit), and
the last row against ``shard_head``. Then the global positions: dense from 1 across the shards.

The integrity chain (shard -1, :mod:`events.postgres.checkpoints`) is walked first, the same
way; each ``journal.node_joined`` row adds a key to the recorded roster, and each
``journal.super_checkpoint`` must hash its heads, count its rows, move no shard back, and carry
a signature that verifies under a key of the roster: the one the caller pinned (``roster``), or
else the recorded one (which anchors nothing: whoever can write the database can add a key).
Each head it signs must then be the hash of that row of that shard: a shard chain rewritten
whole, every hash recomputed, fails there, naming the shard. Each note of ``witness`` must be a
super-checkpoint of the chain, with its hash and signature (a deleted last checkpoint shows as
the chain ending before the witness does).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from psycopg import sql

from events.catalog import JournalNodeJoined, JournalSuperCheckpoint
from events.chain import GENESIS, payload_digest, row_hash, stored_identity
from events.checkpoint import CHECKPOINT_STREAM, Checkpoint, signature_valid
from events.codec import decode
from events.envelope import Head, StoredEvent
from events.errors import JournalTampered, JournalUnavailable, UnknownEventKind
from events.note import CheckpointNote
from events.postgres.checkpoints import (
    JOINED_KIND,
    LAST_SQL,
    OF_KIND_SQL,
    SUPER_KIND,
    decode_heads,
    joined,
)
from events.postgres.database import connect, failures, shard_count
from events.postgres.reader import COLUMNS, to_event
from events.postgres.schema import INTEGRITY_SHARD
from events.sqlite.verify import Fault, VerifyReport

log = logging.getLogger(__name__)

BATCH = 20_000
WORKERS = 4
"""Connections walking shard chains at once (at most one per shard). The rows are decoded and
hashed in Python, under the GIL: more connections overlap the server's reading with that work
and no more (docs/benchmarks.md: ~1.6x over one at best on 2 cores)."""
_HEADS = "SELECT shard, pos, hash FROM shard_head ORDER BY shard"
_BOUNDS = "SELECT coalesce(min(position), 0), coalesce(max(position), 0), count(*) FROM events"
START = Head(0, GENESIS)
"""Where a shard's walk starts when nothing vouches for a later row: before its first."""
Rows = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
Visit = Callable[[StoredEvent], None]


def refusal(fault: Fault) -> JournalTampered:
    """What a writer raises instead of opening a journal that fails with ``fault``."""
    return JournalTampered(
        f"the journal database fails verification at position {fault.position} "
        f"({fault.kind}: {fault.message}); refusing to open it for writing, nothing was "
        "signed - investigate with: reel journal verify --dsn ... --roster ... --witness ...",
        fault.kind,
        fault.position,
    )


class _Found(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def verify_database(
    dsn: str,
    *,
    roster: Collection[bytes] | None = None,
    witness: Sequence[CheckpointNote] | None = None,
    workers: int = WORKERS,
) -> VerifyReport:
    """Verify the journal in the database ``dsn`` names against the ``roster`` of public keys
    the caller pinned (``None``: the roster the journal records) and the notes of a node's
    ``witness``; never raises for tampering (the report carries the first fault). Raises
    :class:`events.JournalUnavailable` when it cannot read.

    The whole walk reads one snapshot (a read-only repeatable-read transaction, which takes no
    transaction id and so holds no horizon; the shard walkers import it): rows a node appends
    meanwhile are not half seen. The shard chains are walked by up to ``workers`` connections
    at once (:class:`_Walks`); the report is the one a walk of shard after shard gives."""
    started = time.perf_counter()
    events = 0
    fault: Fault | None = None
    with connect(dsn, autocommit=False) as conn, failures(dsn, "cannot verify"):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        shards = shard_count(conn, dsn)

        def rows(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        heads = {int(s): Head(int(p), bytes(h)) for s, p, h in rows(_HEADS)}
        signed = _Signed(shards, roster, witness)
        try:
            integrity = heads.get(INTEGRITY_SHARD, Head(0, GENESIS))
            events += _walk(rows, shards, INTEGRITY_SHARD, integrity, signed.feed)
            signed.witnessed()
            (snapshot,) = rows("SELECT pg_export_snapshot()")[0]
            walks = _Walks(dsn, str(snapshot), shards, heads, signed)
            walks.run(rows, workers)
            events += sum(walks.lengths[: walks.bound])
            if walks.bound < shards:
                raise _Found(walks.faults[walks.bound])
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
        covered = sum(h.position for s, h in heads.items() if s != INTEGRITY_SHARD)
        conn.rollback()
    by_roster = roster is not None and signed.count > 0
    by_witness = witness is not None and len(witness) > 0
    anchors = [name for name, on in (("pinned roster", by_roster), ("witness", by_witness)) if on]
    anchored = fault is None and bool(anchors)
    return VerifyReport(
        ok=fault is None,
        events=events,
        head_position=head.position,
        head_hash=head.hash.hex(),
        checkpoints=signed.count,
        last_checkpoint_position=signed.size,
        key_trusted=roster is not None,
        elapsed_s=time.perf_counter() - started,
        fault=fault,
        anchored=anchored,
        anchor=" + ".join(anchors) if anchored else "unanchored",
        key_source="pinned" if roster is not None else "embedded",
        public_key=signed.signer.hex(),
        witness_checkpoints=len(witness) if witness is not None else None,
        unsigned_rows=max(0, covered - signed.size) if fault is None else 0,
        last_checkpoint_row=signed.row,
    )


class _Stopped(Exception):
    """A shard walk given up: a lower shard failed, or the walk as a whole ended."""


class _Walks:
    """The shard chains of one verification, walked by a few threads at once, each on its own
    connection in the snapshot the verification exported.

    Shards are handed out lowest first. The first fault in shard order is the one reported,
    whichever walk finds one first: a fault in shard ``k`` lowers :attr:`bound` to ``k``, so
    shards above it are not started and walks above it stop before their next batch, while
    the walks below it go on (one of them may yet find a lower fault). An error (the database
    gone) or the caller leaving stops every walk before its next batch."""

    def __init__(
        self, dsn: str, snapshot: str, shards: int, heads: dict[int, Head], signed: _Signed
    ) -> None:
        self.dsn, self.snapshot, self.shards = dsn, sql.Literal(snapshot), shards
        self.heads, self.signed = heads, signed
        self.lock = threading.Lock()
        self.next = 0
        self.bound = shards
        """The lowest shard found faulty (``shards``: none yet)."""
        self.faults: dict[int, Fault] = {}
        self.lengths = [0] * shards
        self.stopped = False
        self.error: BaseException | None = None

    def run(self, rows: Rows, workers: int) -> None:
        """Walk every shard: on ``rows`` (the caller's connection, in this thread) and on up to
        ``workers - 1`` more connections in threads of their own; returns once each thread
        has ended, raising the first error one met."""
        threads = [
            threading.Thread(target=self._worker, name=f"verify-{n}", daemon=True)
            for n in range(1, max(1, min(workers, self.shards)))
        ]
        try:
            for thread in threads:
                thread.start()
            self._walk_all(rows)
        except BaseException:  # the database gone, or the caller interrupted: stop them all
            with self.lock:
                self.stopped = True
            raise
        finally:
            for thread in threads:
                thread.join()
        if self.error is not None:
            raise self.error

    def _worker(self) -> None:
        try:
            conn = connect(self.dsn, autocommit=False)
        except JournalUnavailable as exc:  # no connection to spare: the others walk its shards
            log.info("verify: walking with a connection fewer: %s", exc)
            return
        try:
            with conn, failures(self.dsn, "cannot verify"):
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(self.snapshot))

                def rows(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
                    return conn.execute(sql, args).fetchall()

                self._walk_all(rows)
                conn.rollback()
        except BaseException as exc:  # reported by run(), in the caller's thread
            with self.lock:
                self.stopped = True
                self.error = self.error or exc

    def _walk_all(self, rows: Rows) -> None:
        while (shard := self._take()) is not None:

            def batch(sql: str, args: tuple[Any, ...] = (), shard: int = shard) -> list[Any]:
                if self.stopped or shard > self.bound:
                    raise _Stopped
                return rows(sql, args)

            try:
                length = _walk(
                    batch, self.shards, shard, self.heads.get(shard), self.signed.check(shard)
                )
                self.signed.beyond(shard, length)
                self.lengths[shard] = length
            except _Stopped:
                return
            except _Found as found:
                with self.lock:
                    self.faults[shard] = found.fault
                    self.bound = min(self.bound, shard)

    def _take(self) -> int | None:
        with self.lock:
            if self.stopped or self.next >= self.bound:
                return None
            self.next += 1
            return self.next - 1


class _Signed:
    """What the integrity chain signed, fed its rows in chain order (:meth:`feed`), then held
    against the witness (:meth:`witnessed`) and each shard's rows (:meth:`check`)."""

    def __init__(
        self,
        shards: int,
        roster: Collection[bytes] | None,
        witness: Sequence[CheckpointNote] | None,
    ) -> None:
        self.shards = shards
        self.pinned = frozenset(roster) if roster is not None else None
        self.recorded: set[bytes] = set()
        self.notes = list(witness or ())
        self.seq = 0
        self.count = 0
        self.size = 0
        """The rows the last super-checkpoint covers."""
        self.row = 0
        """The global position of the last super-checkpoint row."""
        self.signer = b""
        self.positions = [0] * shards
        """Each shard's head position as the last super-checkpoint signed it."""
        self.by_size: dict[int, JournalSuperCheckpoint] = {}
        self.expected: list[dict[int, tuple[bytes, int]]] = [{} for _ in range(shards)]
        """Per shard: ``shard_pos -> (hash, the super-checkpoint row that signed it)``."""

    def feed(self, row: StoredEvent) -> None:
        where = f"row {row.shard_pos} of the integrity chain (position {row.position})"

        def bad(why: str, kind: str = "bad_checkpoint") -> _Found:
            message = f"{where} {why}"
            return _Found(Fault(kind=kind, position=row.position, message=message))

        if row.stream != CHECKPOINT_STREAM or row.kind not in (SUPER_KIND, JOINED_KIND):
            raise bad(f"is a {row.kind!r} on stream {row.stream!r}: only the journal's own")
        if row.stream_seq != self.seq:
            raise bad(f"has stream_seq {row.stream_seq}, but {self.seq} rows precede it")
        self.seq += 1
        try:
            event = decode(row.kind, row.version, row.payload)
        except UnknownEventKind as exc:
            raise bad(f"does not decode: {exc}") from None
        if isinstance(event, JournalNodeJoined):
            self.recorded.add(event.public_key)
            return
        assert isinstance(event, JournalSuperCheckpoint)
        trusted = self.pinned if self.pinned is not None else self.recorded
        if event.public_key not in trusted:
            whose = "the pinned roster" if self.pinned is not None else "the recorded roster"
            raise bad(f"is signed by a key not in {whose}", "bad_checkpoint_signature")
        checkpoint = Checkpoint.of(event, row.position, row.recorded_at_ms)
        if not signature_valid(checkpoint, event.public_key):
            raise bad("has a signature that does not verify", "bad_checkpoint_signature")
        if hashlib.sha256(event.heads).digest() != event.hash:
            raise bad("signs a hash that is not SHA-256 of its heads")
        try:
            heads = decode_heads(event.heads)
        except ValueError as exc:
            raise bad(f"holds malformed heads: {exc}") from None
        if [s for s, _, _ in heads] != list(range(self.shards)):
            raise bad(f"does not sign the heads of shards 0..{self.shards - 1}, in order")
        if event.size != sum(p for _, p, _ in heads):
            raise bad(f"says it covers {event.size} rows, its heads {sum(p for _, p, _ in heads)}")
        for shard, pos, _ in heads:
            if pos < self.positions[shard]:
                raise bad(f"moves shard {shard} back from row {self.positions[shard]} to {pos}")
        if event.size <= self.size:
            raise bad(f"covers {event.size} rows, the super-checkpoint before it {self.size}")
        for shard, pos, hash_ in heads:
            if pos:
                self.expected[shard].setdefault(pos, (hash_, row.position))
            self.positions[shard] = pos
        self.count += 1
        self.size, self.row, self.signer = event.size, row.position, event.public_key
        self.by_size[event.size] = event

    def witnessed(self) -> None:
        """Every note of the witness is a super-checkpoint of the chain, hash and signature."""
        for note in self.notes:
            event = self.by_size.get(note.size)
            if note.size > self.size:
                raise _Found(
                    Fault(
                        kind="truncated_tail",
                        position=self.row + 1,
                        message=f"the witness recorded a super-checkpoint over {note.size} rows, "
                        f"but the integrity chain's last covers {self.size}: super-checkpoints "
                        "were removed",
                    )
                )
            if event is None:
                raise _Found(
                    Fault(
                        kind="missing_checkpoint",
                        position=self.row,
                        message=f"the witness recorded a super-checkpoint over {note.size} rows; "
                        "the integrity chain has none: it was deleted",
                    )
                )
            if event.hash != note.hash:
                raise _Found(
                    Fault(
                        kind="rewritten_chain",
                        position=self.row,
                        message=f"the super-checkpoint over {note.size} rows signs heads hashing "
                        f"to {event.hash.hex()[:16]}..., the witness recorded "
                        f"{note.hash.hex()[:16]}...: the shards were rewritten and signed again",
                    )
                )
            if note.signatures and all(s.signature != event.signature for s in note.signatures):
                raise _Found(
                    Fault(
                        kind="bad_checkpoint_signature",
                        position=self.row,
                        message=f"the super-checkpoint over {note.size} rows carries another "
                        "signature than the witness recorded: it was signed again",
                    )
                )

    def check(self, shard: int) -> Visit:
        """What :func:`_walk` calls on each row of ``shard``: the row's hash against the head a
        super-checkpoint signed at its position."""
        expected = self.expected[shard]

        def visit(row: StoredEvent) -> None:
            signed = expected.pop(row.shard_pos, None)
            if signed is not None and signed[0] != row.hash:
                raise _Found(
                    Fault(
                        kind="rewritten_chain",
                        position=row.position,
                        checkpoint_position=signed[1],
                        message=f"shard {shard} was rewritten: its row {row.shard_pos} (position "
                        f"{row.position}) hashes to {row.hash.hex()[:16]}..., the "
                        f"super-checkpoint at position {signed[1]} signed "
                        f"{signed[0].hex()[:16]}...",
                    )
                )

        return visit

    def beyond(self, shard: int, length: int) -> None:
        """After ``shard``'s walk (``length`` rows): no signed head lies past its end."""
        if self.expected[shard]:
            pos, (_, at) = max(self.expected[shard].items())
            raise _Found(
                Fault(
                    kind="truncated_tail",
                    position=at,
                    checkpoint_position=at,
                    message=f"shard {shard} ends at row {length}, but the super-checkpoint at "
                    f"position {at} signed its head at row {pos}: rows were removed",
                )
            )


def _walk(
    rows: Rows,
    shards: int,
    shard: int,
    recorded: Head | None,
    visit: Visit | None = None,
    start: Head = START,
) -> int:
    """Walk ``shard``'s rows after ``start`` (a row already held good, or genesis) to its
    recorded head; the rows walked, plus ``start``'s; raises :class:`_Found` at a fault."""
    pos, prev = start.position, start.hash
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
            identity = stored_identity(shards, e)
            if row_hash(prev, identity, e.payload) != e.hash:
                altered = payload_digest(e.payload) != bytes(row[-1])
                raise _Found(
                    Fault(
                        kind="altered_payload" if altered else "altered_envelope",
                        position=e.position,
                        message=f"{where}: its {'payload' if altered else 'envelope'} was altered",
                    )
                )
            if visit is not None:
                visit(e)
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
    """Walk one shard's chain on ``conn`` from the head the last super-checkpoint signed for it
    (from genesis when none did) to its ``shard_head``: the first fault, or ``None``. A node
    runs it on every shard it acquires before it appends to it (:mod:`events.postgres.leases`),
    so the cost is the rows appended since the last signing, not the shard's length.

    The signed head is taken only if the super-checkpoint's signature verifies under a key of
    the roster the journal records, and the row at that position still hashes, from its stored
    link and its content, to what was signed: a shard rewritten whole is refused here (a walk
    from genesis finds such a chain consistent). Rows before the signed head are not read
    again; ``reel journal verify`` and the node's start walk them all."""

    def rows(sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return list(conn.execute(sql, args).fetchall())

    head = rows("SELECT pos, hash FROM shard_head WHERE shard = %s", (shard,))
    try:
        start = _signed_head(rows, shards, shard)
        recorded = Head(int(head[0][0]), bytes(head[0][1])) if head else None
        _walk(rows, shards, shard, recorded, start=start)
    except _Found as found:
        return found.fault
    return None


def _signed_head(rows: Rows, shards: int, shard: int) -> Head:
    """``shard``'s head as the integrity chain's last super-checkpoint signed it, checked (see
    :func:`verify_shard`); genesis when nothing signed it. Raises :class:`_Found`."""
    last = rows(LAST_SQL, (SUPER_KIND,))
    if not last:
        return START
    position, recorded_at_ms, version, payload = last[0]
    row_position = int(position)
    event = decode(SUPER_KIND, int(version), bytes(payload))
    assert isinstance(event, JournalSuperCheckpoint)
    checkpoint = Checkpoint.of(event, row_position, int(recorded_at_ms))
    keys = {joined(r).public_key for r in rows(OF_KIND_SQL, (JOINED_KIND,))}
    where = f"the last super-checkpoint (position {row_position})"
    if (
        event.public_key not in keys
        or not signature_valid(checkpoint, event.public_key)
        or hashlib.sha256(event.heads).digest() != event.hash
    ):
        raise _Found(
            Fault(
                kind="bad_checkpoint_signature",
                position=row_position,
                message=f"{where} is not signed by a key of the roster over its heads",
            )
        )
    signed = {s: (p, h) for s, p, h in decode_heads(event.heads)}
    pos, hash_ = signed.get(shard, (0, GENESIS))
    if not pos:
        return START
    found = rows(f"SELECT {COLUMNS} FROM events WHERE shard = %s AND shard_pos = %s", (shard, pos))
    if found:
        e = to_event(found[0])
        if (
            e.hash == hash_
            and row_hash(e.prev_hash, stored_identity(shards, e), e.payload) == hash_
        ):
            return Head(pos, hash_)
    raise _Found(
        Fault(
            kind="rewritten_chain",
            position=to_event(found[0]).position if found else row_position,
            checkpoint_position=row_position,
            message=f"shard {shard} was rewritten: its row {pos} is "
            + ("not the one " if found else "missing, ")
            + f"{where} signed",
        )
    )
