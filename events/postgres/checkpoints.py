"""Super-checkpoints: one signature over every shard chain's head, kept in the integrity chain.

A shard chain alone cannot show it was rewritten whole (the format is public: recompute every
hash, move ``shard_head``). A signature over its head by a key the rewriter does not hold can,
and a witness file outside the database can even against someone who deletes the signatures.
The PostgreSQL journal keeps them in shard -1 (:data:`events.postgres.schema.INTEGRITY_SHARD`),
a chain like any shard, on the ``journal`` stream (refused to every other writer): a
``journal.node_joined`` row when a node's key joins the roster, then a
``journal.super_checkpoint`` row per signature.

What is signed is the node's own checkpoint note (:meth:`events.checkpoint.NodeKey.sign`, a C2SP
tlog-checkpoint body): ``size`` is the number of rows the heads cover (the sum of their
positions) and ``hash`` is SHA-256 of the heads, each ``int64 shard || int64 shard_pos ||
32-byte hash`` in shard order. So the key, the signed text, the witness file and its reader are
the SQLite journal's (:mod:`events.witness`); only what the hash stands for differs.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

from events.catalog import JournalNodeJoined, JournalSuperCheckpoint, kind_of
from events.checkpoint import Checkpoint, NodeKey
from events.codec import decode
from events.postgres.schema import INTEGRITY_SHARD

SUPER_KIND = kind_of(JournalSuperCheckpoint)
JOINED_KIND = kind_of(JournalNodeJoined)
HEAD = struct.Struct(">qq32s")
"""One shard's head in ``heads``: shard, shard_pos, hash."""
HEADS_SQL = "SELECT shard, pos, hash FROM shard_head WHERE shard >= 0 ORDER BY shard"
"""Every data shard's head, read in one statement (one MVCC snapshot)."""
OF_KIND_SQL = (
    "SELECT position, recorded_at_ms, version, payload FROM events "
    f"WHERE shard = {INTEGRITY_SHARD} AND kind = %s ORDER BY shard_pos"
)
"""The integrity chain's rows of one kind, in chain order."""
LAST_SQL = OF_KIND_SQL + " DESC LIMIT 1"
"""The integrity chain's last row of one kind."""

Heads = Sequence[tuple[int, int, bytes]]


def encode_heads(heads: Heads) -> bytes:
    """The bytes a super-checkpoint's ``hash`` is SHA-256 of."""
    return b"".join(HEAD.pack(int(s), int(p), bytes(h)) for s, p, h in heads)


def decode_heads(data: bytes) -> list[tuple[int, int, bytes]]:
    """The heads ``data`` holds; :class:`ValueError` when it is not whole entries."""
    if len(data) % HEAD.size:
        raise ValueError(f"{len(data)} bytes are not whole {HEAD.size}-byte heads")
    return [HEAD.unpack_from(data, i) for i in range(0, len(data), HEAD.size)]


def sign(key: NodeKey, heads: Heads) -> JournalSuperCheckpoint:
    """The super-checkpoint ``key`` signs over ``heads`` (every data shard's, in order)."""
    data = encode_heads(heads)
    signed = key.sign(sum(int(p) for _, p, _ in heads), hashlib.sha256(data).digest(), 0)
    return JournalSuperCheckpoint(
        origin=signed.origin,
        size=signed.position,
        hash=signed.hash,
        heads=data,
        public_key=signed.public_key,
        signature=signed.signature,
    )


def stored_checkpoint(row: tuple[Any, ...]) -> Checkpoint:
    """The :class:`Checkpoint` of a super-checkpoint row selected by :data:`OF_KIND_SQL`."""
    position, recorded_at_ms, version, payload = row
    event = decode(SUPER_KIND, version, bytes(payload))
    assert isinstance(event, JournalSuperCheckpoint)
    return Checkpoint.of(event, position, recorded_at_ms)


def joined(row: tuple[Any, ...]) -> JournalNodeJoined:
    """The ``journal.node_joined`` event a row selected by :data:`OF_KIND_SQL` holds."""
    _, _, version, payload = row
    event = decode(JOINED_KIND, version, bytes(payload))
    assert isinstance(event, JournalNodeJoined)
    return event
