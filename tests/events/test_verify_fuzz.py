"""Tampered journals never crash verification: random edits of random columns (any SQLite type),
of checkpoint payloads (valid msgpack of the wrong shape) and of the witness. Every outcome is a
report (a fault, or intact-and-said-how) or, for an unreadable witness, a WitnessError; the
node's start-up check raises JournalTampered or opens; nothing else escapes."""

from __future__ import annotations

import contextlib
import random
import shutil
from pathlib import Path
from typing import cast

import apsw
import msgspec
import pytest

from events import Journal, JournalReader, JournalTampered, NodeKey, Witness, WitnessError, verify
from events.sqlite.verify import verify_recent
from events.witness import parse_witness
from tests.events.conftest import Pristine
from tests.events.journal_testkit import JOURNAL, KEY, ROW_COLUMNS, checkpoint_rows, tamper

SEED = 1107
VALUES: list[object] = [
    None,
    0,
    -1,
    2**63 - 1,
    -(2**63),
    1.5,
    "",
    "journal",
    "journal.checkpoint",
    "\u2014 \n\n",
    b"",
    b"\x00" * 32,
    b"\xc1",
    bytes(range(256)),
]
SHAPES: list[object] = [
    {},
    [],
    {"kind": "journal.checkpoint"},
    {"size": -1, "hash": 5},
    {"origin": None},
    {"signature": "text"},
    {"public_key": b"\x00" * 31},
    {"previous": 2**64 - 1},
]


def verdict(path: Path, key: NodeKey, notes: list[object] | None) -> None:
    reader = JournalReader.open(path)
    try:
        for report in (
            verify(reader, trusted_public_key=key.public_key, witness=notes),  # type: ignore[arg-type]
            verify(reader),
            verify_recent(reader, trusted_public_key=key.public_key, witness=notes),  # type: ignore[arg-type]
        ):
            assert report.ok == (report.fault is None)
            if report.fault is not None:
                assert report.fault.kind and report.fault.message
    finally:
        reader.close()


@pytest.mark.parametrize("case", range(60))
def test_random_column_edits_never_crash_verify(
    pristine: Pristine, tmp_path: Path, case: int
) -> None:
    rng = random.Random(SEED * 1000 + case)
    data = tmp_path / "data"
    shutil.copytree(pristine.data, data)
    witness = tmp_path / "witness"
    shutil.copy(pristine.witness, witness)
    with tamper(data / JOURNAL) as conn:
        rows = [cast(int, p) for (p,) in conn.execute("SELECT position FROM events").fetchall()]
        cps = checkpoint_rows(conn)
        for _ in range(rng.randint(1, 3)):
            position = rng.choice(cps if rng.random() < 0.4 else rows)
            if rng.random() < 0.3 and position in cps:
                payload = msgspec.msgpack.encode(rng.choice(SHAPES))
                conn.execute(
                    "UPDATE events SET payload = ? WHERE position = ?", (payload, position)
                )
                continue
            column = rng.choice([c for c in ROW_COLUMNS if c != "position"])
            value = rng.choice(VALUES)
            with contextlib.suppress(apsw.ConstraintError):  # NOT NULL, the stream index
                conn.execute(
                    f"UPDATE events SET {column} = ? WHERE position = ?", (value, position)
                )
    notes = parse_witness(witness.read_bytes())[0]
    verdict(data / JOURNAL, pristine.key, notes)  # type: ignore[arg-type]
    try:
        Journal(
            data / JOURNAL, node_key=NodeKey.load(data / KEY), witness=Witness.open(witness)
        ).close(checkpoint=False)
    except JournalTampered as refused:
        assert "\n" not in str(refused)


@pytest.mark.parametrize("case", range(20))
def test_random_witness_edits_are_a_clear_error_or_a_verdict(
    pristine: Pristine, tmp_path: Path, case: int
) -> None:
    rng = random.Random(SEED + case)
    data = bytearray(pristine.witness.read_bytes())
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data))
        data[at : at + rng.randint(0, 3)] = bytes(
            rng.randrange(256) for _ in range(rng.randint(0, 3))
        )
    try:
        notes = parse_witness(bytes(data))[0]
    except WitnessError as exc:
        assert "\n" not in str(exc)
        return
    verdict(pristine.data / JOURNAL, pristine.key, notes)  # type: ignore[arg-type]
