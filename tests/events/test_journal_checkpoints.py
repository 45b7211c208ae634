"""Signed checkpoints and the node key file."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, generate_private_key

from events import CheckpointKeyError, Journal, JournalReader, JournalTampered, NodeKey, verify
from events.catalog import RunOutput
from events.checkpoint import signature_valid
from events.errors import VerifyStopped


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


def test_node_key_is_created_with_mode_0600(data_dir: Path) -> None:
    path = data_dir / "node.key"
    key = NodeKey.load_or_create(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in path.read_bytes()
    assert len(key.public_key) == 32
    assert NodeKey.load_or_create(path).public_key == key.public_key  # loaded, not replaced
    assert [p.name for p in data_dir.iterdir()] == ["node.key"]  # no temp file left behind


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_key_readable_by_others_is_refused(data_dir: Path, mode: int) -> None:
    path = data_dir / "node.key"
    NodeKey.load_or_create(path)
    path.chmod(mode)
    for load in (NodeKey.load, NodeKey.load_or_create):
        with pytest.raises(CheckpointKeyError, match=f"mode {mode:o}") as info:
            load(path)
        assert "\n" not in str(info.value)


def test_missing_key_is_a_checkpoint_key_error(data_dir: Path) -> None:
    with pytest.raises(CheckpointKeyError, match="cannot read node key"):
        NodeKey.load(data_dir / "node.key")


def write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, data)
    os.close(fd)


def test_garbage_and_wrong_key_types_are_refused(data_dir: Path) -> None:
    garbage = data_dir / "garbage.key"
    write_private(garbage, b"not a key at all")
    with pytest.raises(CheckpointKeyError, match="not a PEM private key"):
        NodeKey.load(garbage)
    ec = data_dir / "ec.key"
    write_private(
        ec,
        generate_private_key(SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    with pytest.raises(CheckpointKeyError, match="not an Ed25519 key"):
        NodeKey.load(ec)
    for path in (garbage, ec):  # the error names the file but never prints its contents
        with pytest.raises(CheckpointKeyError) as info:
            NodeKey.load(path)
        assert str(path) in str(info.value)
        assert "PRIVATE" not in str(info.value)


def test_automatic_checkpoints_every_n_events_and_on_close(data_dir: Path) -> None:
    key = NodeKey.load_or_create(data_dir / "node.key")
    journal = Journal(data_dir / "journal.db", node_key=key, checkpoint_every_events=10)
    for i in range(35):
        journal.append("run/1", [out(str(i))], expected_seq=i)
    # Every 10 rows (the checkpoint rows count too): rows 11, 22 and 33 are checkpoints.
    assert [c.position for c in journal.checkpoints()] == [10, 21, 32]
    journal.close()
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        checkpoints = reader.checkpoints()
        assert [c.position for c in checkpoints] == [10, 21, 32, 38]  # 35 events + 3 rows
        assert [c.previous for c in checkpoints] == [0, 11, 22, 33]
        assert reader.head().position == 39
        for checkpoint in checkpoints:
            covered, row = reader.read(after_position=checkpoint.position - 1, limit=2)
            assert checkpoint.hash == covered.hash == row.prev_hash
            assert (row.position, row.kind) == (checkpoint.row_position, "journal.checkpoint")
            assert checkpoint.public_key == key.public_key
            assert checkpoint.origin == key.origin
            assert signature_valid(checkpoint, key.public_key)
            assert not signature_valid(
                checkpoint, NodeKey.load_or_create(data_dir / "o").public_key
            )
    finally:
        reader.close()


def test_no_node_key_means_no_checkpoints(data_dir: Path) -> None:
    with Journal(data_dir / "journal.db", checkpoint_every_events=1) as journal:
        journal.append("run/1", [out()], expected_seq=0)
        assert journal.checkpoint() is None
    reader = JournalReader.open(data_dir / "journal.db")
    assert reader.checkpoints() == []
    reader.close()


def test_a_walk_held_back_waits_for_start_verifying_and_a_stop_before_it_signs_nothing(
    data_dir: Path,
) -> None:
    """``walk_when_told`` (``reel node``, so the walk does not slow its start): nothing is
    verified, so nothing is signed, until ``start_verifying``; then the walk runs and signing
    resumes. A journal stopped before it told the walk to begin ends at once, unverified, and
    signs no final checkpoint."""
    path = data_dir / "journal.db"
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(path, node_key=key, checkpoint_every_events=10**9) as journal:
        journal.append("run/r", [out()], expected_seq=0)
    head = JournalReader.open(path).head()
    heard: list[JournalTampered] = []
    journal = Journal(path, node_key=key, on_tampered=heard.append, walk_when_told=True)
    try:
        journal.append("run/r", [out()], expected_seq=1)  # appends go on meanwhile
        assert not journal._verify_ended.wait(0.5) and not journal.verified
        journal.start_verifying()
        journal.wait_verified()
        assert journal.verified and journal.checkpoint() is not None
    finally:
        journal.close()
    stopped = Journal(path, node_key=key, on_tampered=heard.append, walk_when_told=True)
    signed = JournalReader.open(path).head().position
    stopped.close()
    assert not stopped.verified and JournalReader.open(path).head().position == signed
    with pytest.raises(VerifyStopped):
        stopped.wait_verified()
    assert head.position < signed and heard == []


def test_closing_during_the_full_verification_stops_it_and_signs_nothing(data_dir: Path) -> None:
    """``on_tampered`` walks every row on a thread; ``close`` stops that walk rather than wait
    for it, and a walk cut short vouches for nothing: ``checkpoint`` refuses
    (``VerifyStopped``), and close signs no final checkpoint. A walk that ended before the
    close signs as always. Which of the two happened is the journal's to say (``verified``);
    both are checked, and the journal verifies afterwards either way."""
    path = data_dir / "journal.db"
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(path, node_key=key, checkpoint_every_events=10**9) as journal:
        for seq in range(0, 60_000, 4096):
            journal.append("run/r", [out()] * 4096, expected_seq=seq)
    head = JournalReader.open(path).head()
    heard: list[JournalTampered] = []
    journal = Journal(path, node_key=key, on_tampered=heard.append)
    journal.close()
    reader = JournalReader.open(path)
    try:
        after = reader.read(head.position, 10)
        report = verify(reader, trusted_public_key=key.public_key)
    finally:
        reader.close()
    if journal.verified:
        assert [e.kind for e in after] == ["journal.checkpoint"]
    else:
        assert after == []
        with pytest.raises(VerifyStopped):
            journal.wait_verified()
    assert report.ok and heard == [], report
