"""The hash chain: the exact bytes each row's hash covers (docs/journal-format.md).

``hash = SHA-256(prev_hash || identity || payload)`` where ``prev_hash`` is the previous row's
hash (32 zero bytes for position 1), ``payload`` is the stored payload bytes, and ``identity`` is
the envelope fields in this order, each encoded as:

* integers (position, stream_seq, version, recorded_at_ms): 8 bytes, big-endian, signed;
* strings (event_id, stream, kind, principal): 4-byte big-endian length, then UTF-8 bytes;
* optional strings (correlation_id, causation_id): as strings, or ``FF FF FF FF`` when absent.

Order: position, event_id, stream, stream_seq, kind, version, recorded_at_ms, principal,
correlation_id, causation_id. Every field is self-delimiting, so the payload needs no length.

Format v3 (:func:`shard_identity`) chains each shard of a journal of S shards on its own: the
position is the row's ``shard_pos`` (dense from 1 within its shard), and a journal of S > 1
shards puts the shard (8 bytes) in front of it. A journal of one shard (SQLite: shard 0 of 1)
has one chain and nothing to tell apart, so its v3 bytes are exactly the v2 bytes above: every
existing journal is a valid v3 journal unchanged. The PostgreSQL backend computes the same
bytes in SQL (``reel_row_hash`` in :mod:`events.postgres.schema`).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from events.envelope import StoredEvent

GENESIS = bytes(32)
"""``prev_hash`` of the first row."""

_SHA256 = hashlib.sha256()
"""An empty SHA-256, copied for each hash: ``hashlib.sha256()`` looks the algorithm up in
OpenSSL on every call (``EVP_MD_fetch`` in OpenSSL 3), a copy does not (0.57 against 1.03 us
for a row's 300 bytes, and the writer hashes twice a row). Never updated itself, so threads
share it safely."""

_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_ABSENT = b"\xff\xff\xff\xff"


def _text(value: str) -> bytes:
    data = value.encode("utf-8")
    return _U32.pack(len(data)) + data


@functools.lru_cache(maxsize=4_096)
def _repeated(value: str) -> bytes:
    """``_text`` for fields that repeat from row to row (stream, kind, principal, run id).

    Sized for what is live at once (the kinds, the principals, the streams of the runs in
    flight), not for every stream ever written: at 65,536 entries it held ~9 MiB of one-off
    session streams after 100,000 sessions were created (issue 23's idle-session memory)."""
    return _text(value)


def _optional(value: str | None) -> bytes:
    return _ABSENT if value is None else _repeated(value)


def identity_bytes(
    position: int,
    event_id: str,
    stream: str,
    stream_seq: int,
    kind: str,
    version: int,
    recorded_at_ms: int,
    principal: str,
    correlation_id: str | None,
    causation_id: str | None,
) -> bytes:
    """The canonical encoding of the envelope fields the hash covers."""
    return b"".join(
        (
            _I64.pack(position),
            _text(event_id),
            _repeated(stream),
            _I64.pack(stream_seq),
            _repeated(kind),
            _I64.pack(version),
            _I64.pack(recorded_at_ms),
            _repeated(principal),
            _optional(correlation_id),
            _optional(causation_id),
        )
    )


def shard_identity(
    shards: int,
    shard: int,
    shard_pos: int,
    event_id: str,
    stream: str,
    stream_seq: int,
    kind: str,
    version: int,
    recorded_at_ms: int,
    principal: str,
    correlation_id: str | None,
    causation_id: str | None,
) -> bytes:
    """The format v3 identity of a row of shard ``shard`` of a journal of ``shards`` shards."""
    rest = identity_bytes(
        shard_pos,
        event_id,
        stream,
        stream_seq,
        kind,
        version,
        recorded_at_ms,
        principal,
        correlation_id,
        causation_id,
    )
    return rest if shards == 1 else _I64.pack(shard) + rest


def stored_identity(shards: int, e: StoredEvent) -> bytes:
    """:func:`shard_identity` of a row as stored (its shard, position in it and envelope)."""
    return shard_identity(
        shards,
        e.shard,
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


_POSITION_AND_LENGTH = struct.Struct(">qI")


@functools.lru_cache(maxsize=1_024)
def request_fields(
    stream: str, principal: str, correlation_id: str | None, causation_id: str | None
) -> tuple[bytes, bytes]:
    """The identity fields every row of one append request shares, encoded once for
    :func:`link`: the stream's, and the principal's, correlation's and causation's together.

    Remembered (one lookup in C, not three calls in Python): a stream's appends mostly repeat
    all four (a run's output: its stream, the principal, the run as correlation, no cause).
    Sized like :func:`kind_fields`, for the requests in flight at once: ~300 bytes each."""
    return _repeated(stream), _repeated(principal) + _optional(correlation_id) + _optional(
        causation_id
    )


@functools.lru_cache(maxsize=1_024)
def kind_fields(kind: str, version: int) -> bytes:
    """The kind and version of :func:`identity_bytes`, encoded, for :func:`link`."""
    return _repeated(kind) + _I64.pack(version)


def link(
    prev_hash: bytes,
    position: int,
    event_id: str,
    stream: bytes,
    stream_seq: int,
    kind: bytes,
    recorded_at_ms: bytes,
    rest: bytes,
    payload: bytes,
) -> bytes:
    """``row_hash(prev_hash, identity_bytes(...), payload)`` in one hash over one join, from
    the fields already encoded (``stream`` and ``rest`` by :func:`request_fields`, ``kind`` by
    :func:`kind_fields`, ``recorded_at_ms`` as its 8 bytes): the writer's hot path, the same
    bytes (a test holds the two equal)."""
    event = event_id.encode("utf-8")
    h = _SHA256.copy()
    h.update(
        b"".join(
            (
                prev_hash,
                _POSITION_AND_LENGTH.pack(position, len(event)),
                event,
                stream,
                _I64.pack(stream_seq),
                kind,
                recorded_at_ms,
                rest,
                payload,
            )
        )
    )
    return h.digest()


def recorded_at(recorded_at_ms: int) -> bytes:
    """``recorded_at_ms`` as :func:`link` takes it (one commit's rows share it)."""
    return _I64.pack(recorded_at_ms)


def row_hash(prev_hash: bytes, identity: bytes, payload: bytes) -> bytes:
    """SHA-256 over ``prev_hash || identity || payload``."""
    h = _SHA256.copy()
    h.update(prev_hash)
    h.update(identity)
    h.update(payload)
    return h.digest()


def payload_digest(payload: bytes) -> bytes:
    """SHA-256 of the payload alone: stored beside it so verify can tell a payload edit from an
    envelope edit. It is a diagnostic aid, not part of the chain's guarantee."""
    h = _SHA256.copy()
    h.update(payload)
    return h.digest()
