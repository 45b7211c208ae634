"""Verification: walk the chain and the signed checkpoints; name the first fault and its kind.

Fault kinds (``Fault.kind``):

``altered_payload``
    a row's payload no longer hashes to its recorded hash (and not to its payload digest);
``altered_envelope``
    a row's envelope fields (position, ids, stream, kind, time, principal, prev_hash ...) were
    changed: the payload is intact but the row no longer hashes to its hash;
``deleted_row``
    a position is missing, or a row continues the chain from a row that no longer exists;
``inserted_row``
    a row that is not part of the chain stands between two rows that link to each other;
``reordered_rows``
    a row continues the chain from a row that now stands later in the journal;
``truncated_tail``
    the journal ends before a signed checkpoint's position;
``rewritten_chain``
    the chain is internally consistent but a signed checkpoint recorded a different hash;
``bad_checkpoint_signature``
    a checkpoint's signature does not verify against the trusted node key;
``unreadable``
    a row could not be read at all.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from events.chain import GENESIS, identity_bytes, payload_digest, row_hash
from events.checkpoint import Checkpoint, signature_valid
from events.errors import JournalUnavailable
from events.reader import JournalReader

Progress = Callable[[int, int], None]


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """The first thing found wrong."""

    kind: str
    position: int
    """The first bad position (for ``rewritten_chain``: the checkpoint that disagrees)."""
    message: str
    checkpoint_position: int | None = None
    earliest_position: int | None = None
    """For ``rewritten_chain``: the rewrite began at or after this position."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify`; ``ok`` is true when no fault was found."""

    ok: bool
    events: int
    head_position: int
    head_hash: str
    checkpoints: int
    last_checkpoint_position: int
    key_trusted: bool
    """True when checkpoint signatures were checked against the node's own key (not only
    against the key each checkpoint embeds)."""
    elapsed_s: float
    fault: Fault | None = None


class _Found(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def verify(
    reader: JournalReader,
    *,
    trusted_public_key: bytes | None = None,
    progress: Progress | None = None,
    progress_every: int = 50_000,
) -> VerifyReport:
    """Verify the whole journal behind ``reader``. Never raises for tampering: the report
    carries the fault. (I/O errors opening the file raise before this is called.)"""
    started = time.perf_counter()
    checkpoints = reader.checkpoints()
    total = reader.count()
    events = 0
    head_position, head_hash = 0, GENESIS
    try:
        _check_signatures(checkpoints, trusted_public_key)
        by_position = {c.position: c for c in checkpoints}
        events, head_position, head_hash = _walk(
            reader, by_position, total, progress, progress_every
        )
        _check_tail(checkpoints, head_position)
        fault = None
    except _Found as found:
        fault = found.fault
        if fault.kind not in ("bad_checkpoint_signature", "truncated_tail"):
            # Found by the walk: the rows before the first bad position checked out.
            events = (fault.earliest_position or fault.position) - 1
    if progress is not None:
        progress(total, total)
    return VerifyReport(
        ok=fault is None,
        events=events,
        head_position=head_position,
        head_hash=head_hash.hex(),
        checkpoints=len(checkpoints),
        last_checkpoint_position=checkpoints[-1].position if checkpoints else 0,
        key_trusted=trusted_public_key is not None,
        elapsed_s=round(time.perf_counter() - started, 3),
        fault=fault,
    )


def _check_signatures(checkpoints: list[Checkpoint], trusted: bytes | None) -> None:
    for checkpoint in checkpoints:
        if not signature_valid(checkpoint, trusted):
            why = (
                "was signed by another key"
                if trusted is not None and checkpoint.public_key != trusted
                else "has a signature that does not verify"
            )
            raise _Found(
                Fault(
                    kind="bad_checkpoint_signature",
                    position=checkpoint.position,
                    checkpoint_position=checkpoint.position,
                    message=f"checkpoint at position {checkpoint.position} {why}",
                )
            )


def _walk(
    reader: JournalReader,
    checkpoints: dict[int, Checkpoint],
    total: int,
    progress: Progress | None,
    every: int,
) -> tuple[int, int, bytes]:
    expected = 1
    prev = GENESIS
    before_prev = GENESIS
    events = 0
    last_good_checkpoint = 0
    for row in _readable(reader.scan()):
        position = row[0]
        (event_id, stream, seq, kind, version, at_ms, principal, corr, cause) = row[1:10]
        payload, prev_hash, stored_hash, digest = row[10:14]
        if not isinstance(position, int) or position != expected:
            if isinstance(position, int) and position > expected:
                raise _Found(
                    Fault(
                        kind="deleted_row",
                        position=expected,
                        message=f"position {expected} is missing "
                        f"(the next row present is {position})",
                    )
                )
            raise _Found(
                Fault(kind="unreadable", position=expected, message=f"bad position {position!r}")
            )
        try:
            identity = identity_bytes(
                position,
                event_id,
                stream,
                seq,
                kind,
                version,
                at_ms,
                principal,
                corr,
                cause,
            )
        except (TypeError, ValueError, AttributeError, OverflowError, struct.error) as exc:
            raise _Found(
                Fault(
                    kind="altered_envelope",
                    position=position,
                    message=f"row {position} has an envelope field of the wrong type: {exc}",
                )
            ) from None
        if not isinstance(payload, bytes):
            raise _Found(
                Fault(
                    kind="altered_payload",
                    position=position,
                    message=f"the payload of row {position} is not a blob",
                )
            )
        if prev_hash != prev:
            raise _Found(
                _classify_link(
                    reader,
                    position,
                    identity,
                    payload,
                    prev_hash,
                    stored_hash,
                    prev,
                    before_prev,
                )
            )
        if row_hash(prev, identity, payload) != stored_hash:
            if payload_digest(payload) != digest:
                raise _Found(
                    Fault(
                        kind="altered_payload",
                        position=position,
                        message=f"the payload of row {position} ({kind}) was altered",
                    )
                )
            raise _Found(
                Fault(
                    kind="altered_envelope",
                    position=position,
                    message=f"an envelope field of row {position} ({kind}) was altered",
                )
            )
        checkpoint = checkpoints.get(position)
        if checkpoint is not None:
            if checkpoint.hash != stored_hash:
                raise _Found(
                    Fault(
                        kind="rewritten_chain",
                        position=position,
                        checkpoint_position=position,
                        earliest_position=last_good_checkpoint + 1,
                        message=f"the chain was rewritten: row {position} hashes to "
                        f"{bytes(stored_hash).hex()[:16]}... but the signed checkpoint at "
                        f"{position} recorded {checkpoint.hash.hex()[:16]}...; the rewrite "
                        f"starts after position {last_good_checkpoint}",
                    )
                )
            last_good_checkpoint = position
        before_prev, prev = prev, stored_hash
        expected += 1
        events += 1
        if progress is not None and events % every == 0:
            progress(events, total)
    return events, expected - 1, prev


def _readable(rows: Iterator[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The scanned rows; a row that cannot be read at all ends the walk as ``unreadable``."""
    last = 0
    try:
        for row in rows:
            last = row[0] if isinstance(row[0], int) else last
            yield row
    except JournalUnavailable as exc:
        raise _Found(Fault(kind="unreadable", position=last + 1, message=str(exc))) from None


def _classify_link(
    reader: JournalReader,
    position: int,
    identity: bytes,
    payload: bytes,
    prev_hash: bytes,
    stored_hash: bytes,
    prev: bytes,
    before_prev: bytes,
) -> Fault:
    """Explain why row ``position``'s prev_hash is not the previous row's hash."""
    if row_hash(prev, identity, payload) == stored_hash:
        return Fault(
            kind="altered_envelope",
            position=position,
            message=f"the prev_hash field of row {position} was altered",
        )
    linked_from = reader.position_of_hash(prev_hash)
    if linked_from is not None and linked_from > position:
        return Fault(
            kind="reordered_rows",
            position=position,
            message=f"row {position} continues the chain from row {linked_from}, "
            "which stands after it: rows were reordered",
        )
    if position >= 2 and prev_hash == before_prev:
        return Fault(
            kind="inserted_row",
            position=position - 1,
            message=f"row {position - 1} is not part of the chain: row {position} links "
            f"to row {position - 2}",
        )
    if linked_from is not None and linked_from < position - 1:
        return Fault(
            kind="inserted_row",
            position=linked_from + 1,
            message=f"rows {linked_from + 1}..{position - 1} are not part of the chain: row "
            f"{position} links to row {linked_from}",
        )
    if reader.prev_hash_at(position + 1) == prev:
        return Fault(
            kind="inserted_row",
            position=position,
            message=f"row {position} is not part of the chain: row {position + 1} links "
            f"to row {position - 1}",
        )
    return Fault(
        kind="deleted_row",
        position=position,
        message=f"row {position} continues the chain from a row that is no longer in the "
        f"journal: a row before position {position} was deleted",
    )


def _check_tail(checkpoints: list[Checkpoint], head_position: int) -> None:
    if checkpoints and checkpoints[-1].position > head_position:
        last = checkpoints[-1].position
        raise _Found(
            Fault(
                kind="truncated_tail",
                position=head_position + 1,
                checkpoint_position=last,
                message=f"the journal ends at position {head_position} but a signed checkpoint "
                f"covers position {last}: rows {head_position + 1}..{last} were removed",
            )
        )
