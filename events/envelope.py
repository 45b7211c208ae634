"""The envelope: what the journal stores around each payload, and what an append returns."""

from __future__ import annotations

import msgspec

from events.catalog import Event
from events.codec import decode


class StoredEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One journal row, exactly as stored. ``decode()`` gives the (upcast) event."""

    position: int
    """Global, dense, from 1."""
    event_id: str
    """ULID, monotonic in position order."""
    stream: str
    """``session/<id>``, ``run/<id>``, ``tool/<id>``, ..."""
    stream_seq: int
    """Dense per stream, from 0."""
    kind: str
    version: int
    recorded_at_ms: int
    principal: str
    correlation_id: str | None
    causation_id: str | None
    payload: bytes
    prev_hash: bytes
    hash: bytes
    shard: int = 0
    """The shard chain the row is in (chain format v3; always 0 in a journal of one shard)."""
    shard_pos: int = 0
    """Dense from 1 within its shard: the position the v3 chain hashes (SQLite: ``position``)."""

    def decode(self) -> Event:
        """The payload decoded to the current catalog class (upcast when older)."""
        return decode(self.kind, self.version, self.payload)


class AppendResult(msgspec.Struct, frozen=True, kw_only=True):
    """Where an append landed. A retried append with the same idempotency key gets the
    original result back with ``duplicate=True``."""

    stream: str
    first_position: int
    last_position: int
    first_seq: int
    last_seq: int
    event_ids: tuple[str, ...]
    duplicate: bool = False
    recorded_at_ms: int = 0
    """The ``recorded_at_ms`` of every event of this append (one commit, one clock reading), so
    a writer folds its events with the same times a later reader of the journal sees."""
    events: tuple[Event, ...] = ()
    """The appended events as the journal stores them (redacted), in order: what a writer folds,
    so it need not redact them again. For a duplicate, this call's events as they would have
    been stored. Empty for the rows the journal writes itself (checkpoints)."""

    @property
    def next_seq(self) -> int:
        """The ``expected_seq`` the stream's next append must state."""
        return self.last_seq + 1


class Head(msgspec.Struct, frozen=True):
    """The journal's last position and its hash (position 0 and 32 zero bytes when empty)."""

    position: int
    hash: bytes
