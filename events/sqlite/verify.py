"""Verification: walk every row, the signed checkpoints in the chain and the witness's copies of
them; name the first fault, its kind and its position.

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
``row_out_of_range``
    a row stands at a position below 1 (positions are dense from 1);
``rewritten_chain``
    the chain is internally consistent but a signed checkpoint (or the witness) recorded a
    different hash for a position: the rows before it were rewritten;
``bad_checkpoint``
    a checkpoint row that does not decode, stands where it does not belong (it covers another
    position, names another previous checkpoint, is not the ``journal`` stream's next seq), or
    another kind of row on the ``journal`` stream;
``bad_checkpoint_signature``
    a checkpoint's signature does not verify against the pinned key (or, unpinned, against the
    key of the journal's first checkpoint), or differs from the one the witness recorded;
``missing_checkpoint``
    the witness recorded a checkpoint at a position where the journal has none;
``truncated_tail``
    the journal ends before a checkpoint the witness recorded;
``unreadable``
    a row could not be read at all.

What anchors a verification (``VerifyReport.anchored``): a public key the caller pinned
(checkpoints signed by any other key fail) and/or a witness kept outside the data dir (every
checkpoint it recorded must be in the journal, at its position, with its hash and signature).
Without either, verify still checks everything, but someone who can write the data dir can
rewrite the chain and sign it again with a key of their own: the report says
``anchored: false``. A node verifying itself
(``POST /v1/journal/verify``, gRPC ``Journal.Verify``) checks every signature against its own
key (``key_source: "node"``), which lives in the data dir: that anchors nothing, and is never
called pinned.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal

import msgspec

from events.catalog import JournalCheckpoint
from events.chain import GENESIS, identity_bytes, payload_digest, row_hash
from events.checkpoint import CHECKPOINT_KIND, CHECKPOINT_STREAM, Checkpoint, signature_valid
from events.codec import decode
from events.errors import JournalUnavailable, UnknownEventKind, VerifyStopped
from events.note import CheckpointNote
from events.sqlite.reader import JournalReader

Progress = Callable[[int, int], None]
STOP_EVERY = 4096
"""Rows between two looks at :func:`verify`'s ``stop`` (a few milliseconds of walking)."""
KeySource = Literal["pinned", "node"]
"""Whose key ``trusted_public_key`` is: one the caller pinned, or the node's own."""


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """The first thing found wrong."""

    kind: str
    position: int
    """The first bad position (for ``rewritten_chain``: the row whose hash a checkpoint
    recorded differently)."""
    message: str
    checkpoint_position: int | None = None
    """The checkpoint row (or witnessed checkpoint) that disagrees, when one does."""
    earliest_position: int | None = None
    """For ``rewritten_chain``: the rewrite began at or after this position."""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify`; ``ok`` is true when no fault was found."""

    ok: bool
    events: int
    """Rows verified (checkpoint rows included); before a fault, the rows that checked out."""
    head_position: int
    head_hash: str
    checkpoints: int
    last_checkpoint_position: int
    """The last position the last checkpoint covers (0 when none)."""
    key_trusted: bool
    """True when every signature was checked against the key given (``key_source``), not the
    one the journal's first checkpoint carries."""
    elapsed_s: float
    fault: Fault | None = None
    anchored: bool = False
    """True when a pinned key verified at least one checkpoint, or a witness's checkpoints were
    all found: the journal is tied to something outside its data dir. False: unanchored."""
    anchor: str = "unanchored"
    """``"pinned key"``, ``"witness"``, ``"pinned key + witness"`` or ``"unanchored"``: a
    pinned key is one the caller supplied, never the node's own."""
    key_source: str = "embedded"
    """The key signatures were checked against: ``"pinned"`` (the caller's), ``"node"`` (the
    node's own, from its data dir: no anchor) or ``"embedded"`` (the journal's first
    checkpoint's)."""
    public_key: str = ""
    """Hex of the key the checkpoints are signed with (the given one when given)."""
    witness_checkpoints: int | None = None
    """Checkpoints the witness recorded (all found when ``ok``); ``None`` without a witness."""
    unsigned_rows: int = 0
    """Rows after the last checkpoint row: protected by the chain only (docs/journal-format.md
    section 6 says what that cannot catch)."""
    last_checkpoint_row: int = 0
    """The position of the last checkpoint row (0 when none)."""


class _Found(Exception):
    def __init__(self, fault: Fault) -> None:
        self.fault = fault


def verify(
    reader: JournalReader,
    *,
    trusted_public_key: bytes | None = None,
    key_source: KeySource = "pinned",
    witness: Sequence[CheckpointNote] | None = None,
    progress: Progress | None = None,
    progress_every: int = 50_000,
    stop: Callable[[], bool] | None = None,
) -> VerifyReport:
    """Verify every row of the journal behind ``reader``, every checkpoint in it, and (given
    ``witness``, the notes a witness recorded) that each witnessed checkpoint is in it.
    ``key_source`` says whose ``trusted_public_key`` is: only a pinned one anchors.

    Never raises for tampering: the report carries the fault. (I/O errors opening the file
    raise before this is called.) ``stop`` is asked every :data:`STOP_EVERY` rows; when it
    says true the walk ends there with :class:`VerifyStopped` (no report: it vouches for
    nothing)."""
    started = time.perf_counter()
    total = reader.count()
    walker = _Walker(reader, trusted_public_key, witness, key_source)
    fault: Fault | None = None
    try:
        for row in _readable(reader.scan()):
            walker.feed(row)
            if progress is not None and walker.events % progress_every == 0:
                progress(walker.events, total)
            if stop is not None and walker.events % STOP_EVERY == 0 and stop():
                raise VerifyStopped(
                    f"verification of {reader.path} stopped after {walker.events} rows"
                )
        walker.finish()
    except _Found as found:
        fault = found.fault
    if progress is not None:
        progress(total, total)
    return walker.report(fault, started)


def verify_recent(
    reader: JournalReader,
    *,
    trusted_public_key: bytes | None = None,
    witness: Sequence[CheckpointNote] | None = None,
) -> VerifyReport:
    """The check a node makes before it serves: fast at any size, thorough where it matters.

    - positions are dense from 1 (``min``, ``max`` and ``count`` over every row);
    - every checkpoint row (found through the ``journal`` stream's index): its signature, that
      it covers the row right before it and names the checkpoint before it, and that it and
      the row it covers still hash to what they say;
    - every checkpoint the witness recorded is one of them, with the same hash and signature;
    - every row from the last checkpoint to the head, fully (hashes and links).

    Rows between two older checkpoints are not re-hashed (``reel journal verify`` does that):
    an edit there that leaves both checkpoint neighbourhoods alone is found by a full verify,
    not at start. ``events`` counts the rows this looked at."""
    started = time.perf_counter()
    walker = _Walker(reader, trusted_public_key, witness)
    fault: Fault | None = None
    try:
        low, high, count = reader.bounds()
        if count and low is not None and low < 1:
            walker.out_of_range(low)
        if count and (low, high) != (1, count):
            missing = reader.first_gap() or 1
            walker.gap(missing, missing + 1)
        found: dict[int, tuple[int, JournalCheckpoint]] = {}
        for row in _rows_of_stream(reader, CHECKPOINT_STREAM):
            position = row[0]
            if position < 2:
                raise _bad_checkpoint(position, "stands at position 1: nothing precedes it")
            (covered,) = _readable_rows(reader, position - 1, position - 1)
            walker.resume_at(covered)
            walker.feed(covered)
            walker.feed(row)
            event = decode(row[4], row[5], row[10])
            assert isinstance(event, JournalCheckpoint)
            found[position] = (row[3], event)
        for note in walker.witnessed.values():
            walker.witnessed_in(note, found, high or 0)
        start = 1
        walker.resume_at(None)
        if found:
            start = max(found)
            seq, event = found[start]
            (covered,) = _readable_rows(reader, start - 1, start - 1)
            walker.resume_at(covered)
            walker.feed(covered)
            walker.checkpoints, walker.last_row = seq, event.previous
        for row in _readable(_rows_from(reader, start)):
            walker.feed(row)
        walker.finish()
    except _Found as found_fault:
        fault = found_fault.fault
    return walker.report(fault, started)


def _bad_checkpoint(position: int, why: str) -> _Found:
    return _Found(
        Fault(
            kind="bad_checkpoint",
            position=position,
            checkpoint_position=position,
            message=f"checkpoint row {position} {why}",
        )
    )


class _Walker:
    """The chain walk's state; :meth:`feed` takes rows in position order and raises
    :class:`_Found` at the first fault."""

    def __init__(
        self,
        reader: JournalReader,
        trusted: bytes | None,
        witness: Sequence[CheckpointNote] | None,
        key_source: KeySource = "pinned",
    ) -> None:
        self.reader = reader
        self.trusted = trusted
        self.key_source: str = key_source if trusted is not None else "embedded"
        self.signer = trusted
        self.witnessed: dict[int, CheckpointNote] = {}
        self.witness_given = witness is not None
        for note in witness or ():
            self.witnessed.setdefault(note.size, note)
        self.expected = 1
        self.prev = GENESIS
        self.before_prev = GENESIS
        self.events = 0
        self.checkpoints = 0
        self.last_row = 0
        """The position of the last checkpoint row seen."""
        self.last_covered = 0
        self.head_position = 0
        self.head_hash = GENESIS
        self.seen: set[int] = set()

    # --- positioning --------------------------------------------------------------------

    def resume_at(self, row: tuple[Any, ...] | None) -> None:
        """Go on checking at ``row`` (taking its stored ``prev_hash`` as its link: the caller
        checks rows out of order), or from position 1 when ``None``."""
        if row is None:
            self.expected, self.prev, self.before_prev = 1, GENESIS, GENESIS
            self.checkpoints, self.last_row = 0, 0
            return
        self.expected = row[0]
        self.prev = bytes(row[11]) if isinstance(row[11], bytes) else GENESIS
        self.before_prev = GENESIS

    def witnessed_in(
        self, note: CheckpointNote, found: dict[int, tuple[int, JournalCheckpoint]], head: int
    ) -> None:
        """A witnessed checkpoint is among the (already checked) checkpoint rows ``found``.
        One past the head is left to :meth:`finish` (a truncated tail)."""
        row = note.size + 1
        if row > head:
            return
        entry = found.get(row)
        if entry is None:
            self._missing(note.size, f"row {row} is not a checkpoint")
            return
        event = entry[1]
        if event.hash != note.hash:
            raise _Found(
                Fault(
                    kind="rewritten_chain",
                    position=note.size,
                    checkpoint_position=row,
                    message=f"the chain was rewritten: the witness recorded hash "
                    f"{note.hash.hex()[:16]}... for position {note.size}, the journal's "
                    f"checkpoint signs {event.hash.hex()[:16]}...",
                )
            )
        if note.signatures and all(s.signature != event.signature for s in note.signatures):
            raise _Found(
                Fault(
                    kind="bad_checkpoint_signature",
                    position=row,
                    checkpoint_position=row,
                    message=f"checkpoint at position {row} carries another signature than "
                    "the witness recorded: it was signed again",
                )
            )

    def out_of_range(self, position: int) -> None:
        raise _Found(
            Fault(
                kind="row_out_of_range",
                position=position,
                message=f"a row stands at position {position}: positions start at 1, so it "
                "was inserted",
            )
        )

    def gap(self, missing: int, present: int) -> None:
        raise _Found(
            Fault(
                kind="deleted_row",
                position=missing,
                message=f"position {missing} is missing (the next row present is {present})",
            )
        )

    # --- one row ------------------------------------------------------------------------

    def feed(self, row: tuple[Any, ...]) -> None:
        """Check one row: position, link, hash, then what a checkpoint or the witness says."""
        position = row[0]
        (event_id, stream, seq, kind, version, at_ms, principal, corr, cause) = row[1:10]
        payload, prev_hash, stored_hash, digest = row[10:14]
        if not isinstance(position, int):
            raise _Found(
                Fault(
                    kind="unreadable",
                    position=self.expected,
                    message=f"bad position {position!r}",
                )
            )
        if position < 1:
            self.out_of_range(position)
        if position != self.expected:
            if position > self.expected:
                self.gap(self.expected, position)
            raise _Found(
                Fault(kind="unreadable", position=self.expected, message=f"bad position {position}")
            )
        try:
            identity = identity_bytes(
                position, event_id, stream, seq, kind, version, at_ms, principal, corr, cause
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
        if prev_hash != self.prev:
            raise _Found(
                _classify_link(
                    self.reader,
                    position,
                    identity,
                    payload,
                    prev_hash,
                    stored_hash,
                    self.prev,
                    self.before_prev,
                )
            )
        if row_hash(self.prev, identity, payload) != stored_hash:
            if payload_digest(payload) != digest:
                raise _Found(
                    Fault(
                        kind="altered_payload",
                        position=position,
                        message=f"the payload of row {position} ({_shown(kind)}) was altered",
                    )
                )
            raise _Found(
                Fault(
                    kind="altered_envelope",
                    position=position,
                    message=f"an envelope field of row {position} ({_shown(kind)}) was altered",
                )
            )
        stored = bytes(stored_hash)
        note = self.witnessed.get(position)
        if note is not None and note.hash != stored:
            raise _Found(
                Fault(
                    kind="rewritten_chain",
                    position=position,
                    checkpoint_position=position + 1,
                    earliest_position=self.last_row + 1,
                    message=f"the chain was rewritten: row {position} hashes to "
                    f"{stored.hex()[:16]}... but the witness recorded "
                    f"{note.hash.hex()[:16]}...; the rewrite starts after position "
                    f"{self.last_row}",
                )
            )
        if kind == CHECKPOINT_KIND or stream == CHECKPOINT_STREAM:
            self._checkpoint(position, stream, seq, kind, version, at_ms, payload)
        elif position - 1 in self.witnessed:
            self._missing(position - 1, f"row {position} is a {_shown(kind)}")
        self.before_prev, self.prev = self.prev, stored
        self.expected = position + 1
        self.head_position, self.head_hash = position, stored
        if position not in self.seen:
            self.events += 1
            self.seen.add(position)

    def _checkpoint(
        self,
        position: int,
        stream: str,
        seq: int,
        kind: str,
        version: int,
        at_ms: int,
        payload: bytes,
    ) -> None:
        def bad(why: str) -> _Found:
            return _bad_checkpoint(position, why)

        if kind != CHECKPOINT_KIND or stream != CHECKPOINT_STREAM:
            raise bad(
                f"is a {_shown(kind)} on stream {_shown(stream)}: only checkpoints belong to "
                "'journal'"
            )
        try:
            event = decode(kind, version, payload)
        except UnknownEventKind as exc:
            raise bad(f"does not decode: {exc}") from None
        assert isinstance(event, JournalCheckpoint)
        checkpoint = Checkpoint.of(event, position, at_ms)
        if event.size != position - 1 or event.hash != self.prev:
            raise _Found(
                Fault(
                    kind="rewritten_chain",
                    position=position - 1,
                    checkpoint_position=position,
                    earliest_position=self.last_row + 1,
                    message=f"the chain was rewritten: the checkpoint at row {position} signs "
                    f"position {event.size} with hash {event.hash.hex()[:16]}..., but row "
                    f"{position - 1} hashes to {self.prev.hex()[:16]}...; the rewrite starts "
                    f"after position {self.last_row}",
                )
            )
        if event.previous != self.last_row:
            raise bad(
                f"names row {event.previous} as the previous checkpoint, but that is row "
                f"{self.last_row}"
            )
        if seq != self.checkpoints:
            raise bad(f"has stream_seq {seq}, but {self.checkpoints} checkpoints precede it")
        if self.signer is None:
            self.signer = checkpoint.public_key
        if not signature_valid(checkpoint, self.signer):
            other = checkpoint.public_key != self.signer
            why = (
                (
                    "was signed by another key than the pinned one"
                    if self.trusted
                    else "was signed by another key than the journal's first checkpoint"
                )
                if other
                else "has a signature that does not verify"
            )
            raise _Found(
                Fault(
                    kind="bad_checkpoint_signature",
                    position=position,
                    checkpoint_position=position,
                    message=f"checkpoint at position {position} {why}",
                )
            )
        note = self.witnessed.get(position - 1)
        if (
            note is not None
            and note.signatures
            and all(s.signature != event.signature for s in note.signatures)
        ):
            raise _Found(
                Fault(
                    kind="bad_checkpoint_signature",
                    position=position,
                    checkpoint_position=position,
                    message=f"checkpoint at position {position} carries another signature "
                    "than the witness recorded: it was signed again",
                )
            )
        self.checkpoints += 1
        self.last_row = position
        self.last_covered = event.size

    def _missing(self, size: int, why: str) -> None:
        raise _Found(
            Fault(
                kind="missing_checkpoint",
                position=size + 1,
                checkpoint_position=size + 1,
                message=f"the witness recorded a checkpoint at position {size + 1} (covering "
                f"1..{size}), but {why}: it was deleted",
            )
        )

    def finish(self) -> None:
        """After the last row: every witnessed checkpoint must have been reached."""
        beyond = [size for size in self.witnessed if size + 1 > self.head_position]
        if beyond:
            last = max(beyond) + 1
            raise _Found(
                Fault(
                    kind="truncated_tail",
                    position=self.head_position + 1,
                    checkpoint_position=last,
                    message=f"the journal ends at position {self.head_position} but the "
                    f"witness recorded a checkpoint at {last}: rows "
                    f"{self.head_position + 1}..{last} were removed",
                )
            )

    def report(self, fault: Fault | None, started: float) -> VerifyReport:
        witnessed = len(self.witnessed) if self.witness_given else None
        by_key = self.key_source == "pinned" and self.checkpoints > 0
        by_witness = bool(witnessed)
        anchors = [name for name, on in (("pinned key", by_key), ("witness", by_witness)) if on]
        anchored = fault is None and bool(anchors)
        events = self.events
        if fault is not None and fault.kind not in ("truncated_tail",):
            events = max(0, min(events, (fault.earliest_position or fault.position) - 1))
        return VerifyReport(
            ok=fault is None,
            events=events,
            head_position=self.head_position if fault is None else 0,
            head_hash=(self.head_hash if fault is None else GENESIS).hex(),
            checkpoints=self.checkpoints,
            last_checkpoint_position=self.last_covered,
            key_trusted=self.trusted is not None,
            elapsed_s=round(time.perf_counter() - started, 3),
            fault=fault,
            anchored=anchored,
            anchor=" + ".join(anchors) if anchored else "unanchored",
            key_source=self.key_source,
            public_key=(self.signer or b"").hex(),
            witness_checkpoints=witnessed,
            unsigned_rows=max(0, self.head_position - self.last_row) if fault is None else 0,
            last_checkpoint_row=self.last_row,
        )


def _shown(value: object) -> str:
    """A stored value for a one-line message: as it is when it is plain printable text, else
    its repr (an attacker chooses what tampered rows hold; messages stay one line)."""
    if isinstance(value, str) and value.isprintable() and len(value) <= 80:
        return value
    return repr(value)[:80]


def _readable(rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The scanned rows; a row that cannot be read at all ends the walk as ``unreadable``."""
    last = 0
    try:
        for row in rows:
            last = row[0] if isinstance(row[0], int) else last
            yield row
    except JournalUnavailable as exc:
        raise _Found(Fault(kind="unreadable", position=last + 1, message=str(exc))) from None


def _readable_rows(reader: JournalReader, first: int, last: int) -> list[tuple[Any, ...]]:
    try:
        return reader.raw_rows(first, last)
    except JournalUnavailable as exc:
        raise _Found(Fault(kind="unreadable", position=first, message=str(exc))) from None


def _rows_of_stream(reader: JournalReader, stream: str) -> list[tuple[Any, ...]]:
    try:
        return reader.raw_stream(stream)
    except JournalUnavailable as exc:
        raise _Found(Fault(kind="unreadable", position=0, message=str(exc))) from None


def _rows_from(reader: JournalReader, first: int, batch: int = 20_000) -> Iterator[tuple[Any, ...]]:
    position = first
    while True:
        rows = reader.raw_rows(position, position + batch - 1)
        if not rows:
            return
        yield from rows
        position = rows[-1][0] + 1


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
