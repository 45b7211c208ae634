"""Every kind of edit to a closed journal is found, at the right position, with the right fault
kind (see the kinds documented in events/sqlite/verify.py). test_tamper_matrix.py runs the attacks
again with and without anchors (pinned key, witness) and against the node's start-up check."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import apsw
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events import JournalReader, NodeKey, VerifyReport, verify
from events.catalog import RunOutput
from events.codec import encode
from tests.events.conftest import Pristine
from tests.events.journal_testkit import (
    checkpoint_rows,
    fetch_row,
    insert_row,
    reseal,
    seal,
    shift_positions,
    tamper,
)


def check(path: Path, key: NodeKey | None, witness: Path | None = None) -> VerifyReport:
    from events.witness import read_notes

    reader = JournalReader.open(path)
    try:
        notes = read_notes(witness)[0] if witness is not None else None
        return verify(reader, trusted_public_key=key.public_key if key else None, witness=notes)
    finally:
        reader.close()


def checkpoint_positions(path: Path) -> list[int]:
    """The last position each checkpoint covers (its row is the next one)."""
    reader = JournalReader.open(path)
    try:
        return [c.position for c in reader.checkpoints()]
    finally:
        reader.close()


def assert_fault(report: VerifyReport, kind: str, position: int) -> None:
    assert not report.ok
    assert report.fault is not None
    assert (report.fault.kind, report.fault.position) == (kind, position), report.fault
    assert str(position) in report.fault.message


def test_pristine_journal_verifies(journal_copy: Path, pristine: Pristine) -> None:
    report = check(journal_copy, pristine[1])
    assert report.ok, report.fault
    assert report.fault is None
    assert (report.events, report.head_position) == (135, 135)  # 131 events, 4 checkpoints
    assert report.checkpoints == 4
    assert (report.last_checkpoint_position, report.last_checkpoint_row) == (134, 135)
    assert report.unsigned_rows == 0
    assert report.key_trusted
    assert (report.anchored, report.anchor) == (True, "pinned key")
    assert report.public_key == pristine.key.public_key.hex()
    witnessed = check(journal_copy, pristine.key, pristine.witness)
    assert (witnessed.anchored, witnessed.anchor) == (True, "pinned key + witness")
    assert witnessed.witness_checkpoints == 4
    loose = check(journal_copy, None)
    assert loose.ok and (loose.anchored, loose.anchor) == (False, "unanchored")


def test_altered_payload(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        payload = fetch_row(conn, 57)["payload"]
        assert isinstance(payload, bytes)
        edited = payload.replace(b"question", b"QUESTION") if b"question" in payload else None
        if edited is None:
            edited = payload[:-1] + bytes([payload[-1] ^ 1])
        conn.execute("UPDATE events SET payload = ? WHERE position = 57", (edited,))
    report = check(journal_copy, pristine[1])
    assert_fault(report, "altered_payload", 57)
    assert report.events == 56  # the rows before the fault checked out


@pytest.mark.parametrize("position", [1, 64, 131])
def test_row_that_cannot_be_read(journal_copy: Path, pristine: Pristine, position: int) -> None:
    with tamper(journal_copy) as conn:  # TEXT that is not UTF-8: SQLite stores it as given
        conn.execute(
            "UPDATE events SET stream = CAST(x'c3' AS TEXT) WHERE position = ?", (position,)
        )
    report = check(journal_copy, pristine[1])
    assert report.fault is not None
    assert (report.fault.kind, report.fault.position) == ("unreadable", position)
    assert f"after position {position - 1}" in report.fault.message
    assert report.events == position - 1


def test_payload_replaced_by_text_is_a_fault_not_a_crash(
    journal_copy: Path, pristine: Pristine
) -> None:
    with tamper(journal_copy) as conn:
        conn.execute("UPDATE events SET payload = 'not a blob' WHERE position = 12")
    assert_fault(check(journal_copy, pristine[1]), "altered_payload", 12)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("principal", "user:mallory"),
        ("recorded_at_ms", None),  # +1 ms
        ("stream", "run/elsewhere"),
        ("prev_hash", bytes(32)),
        ("event_id", "01ARZ3NDEKTSV4RRFFQ69G5FAV"),
        ("kind", "run.failed"),
        ("version", 2),
        ("stream_seq", 99),
        ("correlation_id", ""),  # at row 1 it is absent (None): "" must hash differently
        ("causation_id", "call-other"),
        ("hash", b"\x01" * 32),
        ("recorded_at_ms", 1.5),  # a value of the wrong type is a fault, not a crash
        ("principal", b"\x00"),
    ],
)
def test_altered_envelope(
    journal_copy: Path, pristine: Pristine, column: str, value: object
) -> None:
    position = 1 if column == "correlation_id" else 33
    with tamper(journal_copy) as conn:
        before = fetch_row(conn, position)
        assert before["correlation_id"] is None or column != "correlation_id"
        if value is None:
            value = int(before["recorded_at_ms"]) + 1  # type: ignore[call-overload]
        conn.execute(f"UPDATE events SET {column} = ? WHERE position = ?", (value, position))
    assert_fault(check(journal_copy, pristine[1]), "altered_envelope", position)


def test_deleted_row(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        conn.execute("DELETE FROM events WHERE position = 50")
    assert_fault(check(journal_copy, pristine[1]), "deleted_row", 50)


@pytest.mark.parametrize("position", [1, 50, 130])
def test_deleted_row_with_later_positions_renumbered(
    journal_copy: Path, pristine: Pristine, position: int
) -> None:
    with tamper(journal_copy) as conn:
        conn.execute("DELETE FROM events WHERE position = ?", (position,))
        shift_positions(conn, position + 1, -1)
    assert_fault(check(journal_copy, pristine[1]), "deleted_row", position)


def _forged_row(conn: apsw.Connection, position: int) -> dict[str, object]:
    template = fetch_row(conn, position)
    return {
        **template,
        "position": position,
        "stream": "run/forged",
        "stream_seq": 0,
        "kind": "run.output",
        "version": 1,
        "payload": encode(RunOutput(run_id="forged", turn=0, text="I was never said")),
    }


def test_inserted_row_with_correct_hash(journal_copy: Path, pristine: Pristine) -> None:
    at = 60
    with tamper(journal_copy) as conn:
        forged = _forged_row(conn, at)
        prev_hash = fetch_row(conn, at - 1)["hash"]
        assert isinstance(prev_hash, bytes)
        shift_positions(conn, at, +1)
        insert_row(conn, seal(forged, prev_hash))
    assert_fault(check(journal_copy, pristine[1]), "inserted_row", at)


def test_inserted_row_with_garbage_hashes(journal_copy: Path, pristine: Pristine) -> None:
    at = 60
    with tamper(journal_copy) as conn:
        forged = {**_forged_row(conn, at), "prev_hash": b"\xaa" * 32, "hash": b"\xbb" * 32}
        forged["payload_sha256"] = b"\xcc" * 32
        shift_positions(conn, at, +1)
        insert_row(conn, forged)
    assert_fault(check(journal_copy, pristine[1]), "inserted_row", at)


@pytest.mark.parametrize(("first", "second"), [(20, 21), (20, 60), (1, 2)])
def test_reordered_rows(journal_copy: Path, pristine: Pristine, first: int, second: int) -> None:
    with tamper(journal_copy) as conn:
        conn.execute("UPDATE events SET position = -1 WHERE position = ?", (first,))
        conn.execute("UPDATE events SET position = ? WHERE position = ?", (first, second))
        conn.execute("UPDATE events SET position = ? WHERE position = -1", (second,))
    assert_fault(check(journal_copy, pristine[1]), "reordered_rows", first)


def test_truncated_tail_is_found_by_the_witness(journal_copy: Path, pristine: Pristine) -> None:
    checkpoints = checkpoint_positions(journal_copy)
    keep = checkpoints[-2] - 5  # below the last two checkpoints
    with tamper(journal_copy) as conn:
        conn.execute("DELETE FROM events WHERE position > ?", (keep,))
    report = check(journal_copy, pristine.key, pristine.witness)
    assert_fault(report, "truncated_tail", keep + 1)
    assert report.fault is not None
    assert report.fault.checkpoint_position == checkpoints[-1] + 1
    assert report.events == keep  # the chain itself was intact up to the cut
    # The chain and a pinned key cannot see a clean cut: the deleted rows took their
    # checkpoints with them. Verify says so rather than pass it as anchored by a witness.
    pinned = check(journal_copy, pristine.key)
    assert pinned.ok and pinned.anchor == "pinned key" and pinned.witness_checkpoints is None


def _rewrite_from(conn: apsw.Connection, start: int) -> None:
    """Change the payload at ``start`` and recompute every later digest and hash correctly."""
    head = cast(int, conn.execute("SELECT max(position) FROM events").fetchall()[0][0])
    prev = fetch_row(conn, start - 1)["hash"] if start > 1 else bytes(32)
    for position in range(start, head + 1):
        assert isinstance(prev, bytes)
        row = fetch_row(conn, position)
        if position == start:
            row["kind"], row["version"] = "run.output", 1
            row["payload"] = encode(RunOutput(run_id="x", turn=0, text="history, rewritten"))
        sealed = seal(row, prev)
        conn.execute(
            "UPDATE events SET kind = ?, version = ?, payload = ?, payload_sha256 = ?, "
            "prev_hash = ?, hash = ? WHERE position = ?",
            (
                sealed["kind"],
                sealed["version"],
                sealed["payload"],
                sealed["payload_sha256"],
                sealed["prev_hash"],
                sealed["hash"],
                position,
            ),
        )
        prev = sealed["hash"]


@pytest.mark.parametrize("start", [1, 57, 81, 131, 134])
def test_rewritten_chain_is_caught_by_a_checkpoint(
    journal_copy: Path, pristine: Pristine, start: int
) -> None:
    with tamper(journal_copy) as conn:
        _rewrite_from(conn, start)
    report = check(journal_copy, pristine[1])
    assert not report.ok
    fault = report.fault
    assert fault is not None
    assert fault.kind == "rewritten_chain"
    assert fault.earliest_position is not None
    assert fault.earliest_position <= start <= fault.position
    checkpoints = checkpoint_positions(journal_copy)
    assert fault.position == min(c for c in checkpoints if c >= start)
    assert fault.checkpoint_position == fault.position + 1  # the checkpoint row


def _edit_checkpoint(conn: apsw.Connection, row: int, **fields: object) -> None:
    import msgspec

    payload = fetch_row(conn, row)["payload"]
    assert isinstance(payload, bytes)
    values = msgspec.msgpack.decode(payload)
    values.update(fields)
    conn.execute(
        "UPDATE events SET payload = ? WHERE position = ?", (msgspec.msgpack.encode(values), row)
    )


def test_flipped_checkpoint_signature(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        target = checkpoint_rows(conn)[1]
        signature = msgspec_field(conn, target, "signature")
        _edit_checkpoint(conn, target, signature=bytes([signature[0] ^ 0x40]) + signature[1:])
    # The checkpoint is a row of the chain: editing it is editing a payload.
    assert_fault(check(journal_copy, pristine.key), "altered_payload", target)
    with tamper(journal_copy) as conn:
        reseal(conn, target)
    assert_fault(check(journal_copy, pristine.key), "bad_checkpoint_signature", target)
    # Even without the node key, the embedded key no longer verifies the signature.
    assert_fault(check(journal_copy, None), "bad_checkpoint_signature", target)


def msgspec_field(conn: apsw.Connection, row: int, name: str) -> bytes:
    import msgspec

    payload = fetch_row(conn, row)["payload"]
    assert isinstance(payload, bytes)
    value = msgspec.msgpack.decode(payload)[name]
    assert isinstance(value, bytes)
    return value


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"hash": b"\x07" * 32}, "rewritten_chain"),
        ({"size": 5}, "rewritten_chain"),
        ({"previous": 7}, "bad_checkpoint"),
        ({"origin": "reel.journal/0000000000000000"}, "bad_checkpoint_signature"),
        ({"origin": "has a space"}, "bad_checkpoint_signature"),
        ({"public_key": b"\x01" * 32}, "bad_checkpoint_signature"),
        ({"signature": b"short"}, "bad_checkpoint_signature"),
        ({"size": "forty"}, "bad_checkpoint"),
    ],
)
def test_checkpoint_with_an_altered_field_and_resealed_chain(
    journal_copy: Path, pristine: Pristine, fields: dict[str, object], kind: str
) -> None:
    with tamper(journal_copy) as conn:
        target = checkpoint_rows(conn)[0]
        _edit_checkpoint(conn, target, **fields)
        reseal(conn, target)
    position = target - 1 if kind == "rewritten_chain" else target
    assert_fault(check(journal_copy, pristine.key), kind, position)


def test_a_stray_row_on_the_journal_stream(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        conn.execute("UPDATE events SET stream = 'journal', stream_seq = 99 WHERE position = 60")
        reseal(conn, 60)
    assert_fault(check(journal_copy, pristine.key), "bad_checkpoint", 60)


def test_checkpoints_resigned_with_another_key(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        first = checkpoint_rows(conn)[0]
        reseal(conn, first, resign=Ed25519PrivateKey.generate())
    report = check(journal_copy, pristine.key)
    assert_fault(report, "bad_checkpoint_signature", first)
    assert report.fault is not None
    assert "another key" in report.fault.message
    # Without a pinned key verify can only check that one key signed them all: it passes the
    # journal, but does not call it anchored.
    untrusted = check(journal_copy, None)
    assert untrusted.ok
    assert not untrusted.key_trusted and not untrusted.anchored


def test_checkpoints_signed_by_two_keys(journal_copy: Path, pristine: Pristine) -> None:
    with tamper(journal_copy) as conn:
        second = checkpoint_rows(conn)[1]
        reseal(conn, second, resign=Ed25519PrivateKey.generate())
    assert_fault(check(journal_copy, None), "bad_checkpoint_signature", second)


def test_rewrite_with_resigned_checkpoints_needs_an_anchor(
    journal_copy: Path, pristine: Pristine
) -> None:
    with tamper(journal_copy) as conn:
        first = checkpoint_rows(conn)[0]
        _rewrite_from(conn, 30)
        reseal(conn, 30, resign=Ed25519PrivateKey.generate())
    assert_fault(check(journal_copy, pristine.key), "bad_checkpoint_signature", first)
    witnessed = check(journal_copy, None, pristine.witness)
    assert_fault(witnessed, "rewritten_chain", first - 1)
    loose = check(journal_copy, None)
    assert loose.ok and not loose.anchored  # the attacker wins against an unanchored verify


def test_verify_reports_progress(journal_copy: Path) -> None:
    calls: list[tuple[int, int]] = []
    reader = JournalReader.open(journal_copy)
    try:
        report = verify(
            reader, progress=lambda done, total: calls.append((done, total)), progress_every=50
        )
    finally:
        reader.close()
    assert report.ok
    assert calls == [(50, 135), (100, 135), (135, 135)]
