"""The NDJSON export: every row with its hashes, then every checkpoint, one JSON object a line.

An export is enough to re-verify the chain without reel: each ``"record": "event"`` line carries
the envelope fields, the stored payload bytes (``payload_b64``), ``prev_hash`` and ``hash`` (hex);
recompute ``hash`` as docs/journal-format.md describes. ``event`` is the decoded payload for
people to read; it is not what the hash covers. The checkpoints are rows of the chain like any
other (kind ``journal.checkpoint``); the ``"record": "checkpoint"`` lines after the events repeat
them for convenience, each with its C2SP signed note (``note``), which is what a witness holds.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import msgspec

from events.checkpoint import Checkpoint
from events.codec import decode
from events.errors import UnknownEventKind
from events.sqlite.reader import JournalReader


def event_record(row: tuple[Any, ...]) -> dict[str, Any]:
    """The export object for one row from :meth:`JournalReader.scan`."""
    (position, event_id, stream, seq, kind, version, at_ms, principal, corr, cause) = row[:10]
    payload, prev_hash, hash_ = row[10:13]
    try:
        event: Any = msgspec.to_builtins(decode(kind, version, payload))
    except UnknownEventKind as exc:
        event = {"undecodable": str(exc)}
    return {
        "record": "event",
        "position": position,
        "event_id": event_id,
        "stream": stream,
        "stream_seq": seq,
        "kind": kind,
        "version": version,
        "recorded_at_ms": at_ms,
        "principal": principal,
        "correlation_id": corr,
        "causation_id": cause,
        "payload_b64": base64.b64encode(payload).decode("ascii"),
        "prev_hash": bytes(prev_hash).hex(),
        "hash": bytes(hash_).hex(),
        "event": event,
    }


def export_records(reader: JournalReader) -> Iterator[dict[str, Any]]:
    """Every event record in position order, then every checkpoint record."""
    for row in reader.scan():
        yield event_record(row)
    for checkpoint in reader.checkpoints():
        yield checkpoint_record(checkpoint)


def checkpoint_record(checkpoint: Checkpoint) -> dict[str, Any]:
    """The export (and ``GET /v1/journal/checkpoints``) object for one checkpoint."""
    try:
        note: str | None = checkpoint.note()
    except ValueError:  # a tampered row whose origin cannot be a key name: verify names it
        note = None
    return {
        "record": "checkpoint",
        "position": checkpoint.position,
        "hash": checkpoint.hash.hex(),
        "row_position": checkpoint.row_position,
        "previous": checkpoint.previous,
        "origin": checkpoint.origin,
        "signed_at_ms": checkpoint.signed_at_ms,
        "public_key": checkpoint.public_key.hex(),
        "signature": checkpoint.signature.hex(),
        "note": note,
    }
