"""The checkpoint witness: a real file outside the data dir, written by the real journal writer.

What is checked: the notes it holds are the journal's checkpoints, byte for byte; it refuses to
be used when it cannot be (inside the data dir, not a regular file, not creatable, holding
something else); a crash's torn last entry is cut off and the checkpoint appended again from
the journal; a failed append is loud (status, log) and retried, and never blocks the writer;
the journal refuses to open when its witness recorded checkpoints it no longer holds.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from events import (
    Journal,
    JournalReader,
    JournalTampered,
    NodeKey,
    Witness,
    WitnessError,
)
from events.catalog import RunOutput
from events.note import verify_signature
from events.witness import RETRY_S, read_notes
from tests.events.journal_testkit import JOURNAL, KEY, delete_checkpoints, tamper


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


def open_journal(data: Path, witness: Path, key: NodeKey | None = None) -> Journal:
    key = key or NodeKey.load_or_create(data / KEY)
    return Journal(data / JOURNAL, node_key=key, witness=Witness.open(witness, data_dir=data))


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "data"
    data.mkdir()
    return data, tmp_path / "outside" / "witness.notes"


def test_the_witness_holds_every_checkpoint_the_journal_signs(
    places: tuple[Path, Path],
) -> None:
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    for i in range(3):
        journal.append("run/1", [out(str(i))], expected_seq=i)
        journal.checkpoint()
    journal.append("run/1", [out("last")], expected_seq=3)
    journal.close()  # the final checkpoint is flushed to the witness before close returns
    reader = JournalReader.open(data / JOURNAL)
    try:
        signed = reader.checkpoints()
    finally:
        reader.close()
    assert len(signed) == 4
    assert witness.read_text(encoding="utf-8") == "".join(c.note() + "\n" for c in signed)
    notes, length = read_notes(witness)
    assert [(n.size, n.hash) for n in notes] == [(c.position, c.hash) for c in signed]
    assert length == witness.stat().st_size
    key = NodeKey.load(data / KEY)
    assert all(n.signed_by(key.public_key) and n.origin == key.origin for n in notes)


def test_a_remembered_signature_check_answers_only_for_the_same_bytes(
    places: tuple[Path, Path],
) -> None:
    """``verify_signature`` remembers its answers (a start checks each checkpoint in the
    witness and in the journal): once a note verified, the same signature over another body,
    another signature over the same body or another key still fail."""
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    journal.append("run/1", [out("x")], expected_seq=0)
    journal.close()
    (note,), _ = read_notes(witness)
    key = NodeKey.load(data / KEY).public_key
    signature = note.signatures[0].signature
    assert verify_signature(key, signature, note.body)
    assert verify_signature(key, signature, note.body)  # remembered, still true
    assert not verify_signature(key, signature, note.body.replace(b"\n", b"\n\n", 1))
    assert not verify_signature(key, bytes(64), note.body)
    other = NodeKey.load_or_create(data.parent / "other.key").public_key
    assert not verify_signature(other, signature, note.body)


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("inside", "inside the data dir"),
        ("directory", "is a directory"),
        ("no parent", "cannot open witness"),
        ("device", "not a regular file"),
        ("garbage", "entry 1 is not a checkpoint note"),
        ("binary", "not UTF-8"),
    ],
)
def test_an_unusable_witness_is_refused(places: tuple[Path, Path], where: str, words: str) -> None:
    data, witness = places
    if where == "inside":
        witness = data / "witness.notes"
    elif where == "directory":
        witness.mkdir(parents=True)
    elif where == "device":
        witness = Path("/dev/null")
    elif where == "garbage":
        witness.parent.mkdir()
        witness.write_text("not\na\nnote\n\nat all\n\n")
    elif where == "binary":
        witness.parent.mkdir()
        witness.write_bytes(b"\xff\xfe\n\n\xff\n\n")
    with pytest.raises(WitnessError, match=words) as info:
        Witness.open(witness, data_dir=data)
    assert "\n" not in str(info.value)


def test_a_torn_last_entry_is_cut_and_written_again(places: tuple[Path, Path]) -> None:
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    journal.append("run/1", [out()], expected_seq=0)
    journal.close()
    whole = witness.read_bytes()
    witness.write_bytes(whole[:-20])  # a crash in the middle of the append
    assert read_notes(witness)[0] == []  # the torn entry is not a note
    journal = open_journal(data, witness)
    try:
        assert witness.read_bytes() == whole  # cut off, then appended again from the journal
        assert journal.witness is not None and journal.witness.status.appended == 1
    finally:
        journal.close()


def test_checkpoints_signed_while_the_witness_was_away_are_caught_up(
    places: tuple[Path, Path],
) -> None:
    data, witness = places
    witness.parent.mkdir()
    key = NodeKey.load_or_create(data / KEY)
    with Journal(data / JOURNAL, node_key=key) as journal:  # no witness configured yet
        for i in range(3):
            journal.append("run/1", [out(str(i))], expected_seq=i)
            journal.checkpoint()
    open_journal(data, witness).close()
    assert len(read_notes(witness)[0]) == 3


def test_a_failed_append_is_loud_retried_and_never_blocks_the_writer(
    places: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    assert journal.witness is not None
    status = journal.witness.status
    # Swap the witness's descriptor for a read-only one: its writes now fail with EBADF, as a
    # witness on a volume that went away would.
    fd = journal.witness._fd
    saved = os.dup(fd)
    read_only = os.open(witness, os.O_RDONLY)
    os.dup2(read_only, fd)
    os.close(read_only)
    try:
        with caplog.at_level(logging.ERROR, logger="reel.witness"):
            started = time.monotonic()
            journal.append("run/1", [out()], expected_seq=0)
            journal.checkpoint()
            journal.append("run/1", [out()], expected_seq=1)
            assert time.monotonic() - started < 2.0  # the writer did not wait for the witness
            deadline = time.monotonic() + 10
            while journal.witness.status.failures == status.failures:
                assert time.monotonic() < deadline, "the failure was not recorded"
                time.sleep(0.01)
        failing = journal.witness.status
        assert failing.pending == 1 and failing.last_error
        assert any("cannot append" in r.getMessage() for r in caplog.records)
        assert read_notes(witness)[0] == []  # nothing torn left behind
    finally:
        os.dup2(saved, fd)  # the volume is back
        os.close(saved)
    assert journal.witness.flush(RETRY_S * 3)  # the retry wrote it
    healed = journal.witness.status
    assert (healed.pending, healed.last_error, healed.appended) == (0, None, 1)
    journal.close()
    assert len(read_notes(witness)[0]) == 2


def test_the_journal_refuses_to_open_without_a_checkpoint_its_witness_recorded(
    places: tuple[Path, Path],
) -> None:
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    journal.append("run/1", [out()], expected_seq=0)
    journal.close()
    with tamper(data / JOURNAL) as conn:
        (deleted,) = delete_checkpoints(conn)  # the tail is now "intact", and unsigned
    with pytest.raises(JournalTampered) as info:
        open_journal(data, witness)
    assert (info.value.kind, info.value.position) == ("truncated_tail", deleted)
    assert "reel journal verify --data" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_witness_signed_by_another_key_is_refused(places: tuple[Path, Path]) -> None:
    data, witness = places
    witness.parent.mkdir()
    journal = open_journal(data, witness)
    journal.append("run/1", [out()], expected_seq=0)
    journal.close()
    (data / KEY).unlink()  # node.key replaced: the witness no longer matches it
    with pytest.raises(JournalTampered, match="not by this node's key") as info:
        open_journal(data, witness)
    assert info.value.kind == "bad_checkpoint_signature"
