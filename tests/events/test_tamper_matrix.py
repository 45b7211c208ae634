"""The tamper matrix: each attack on a real journal (written by the real :class:`events.Journal`,
checkpoints every 40 rows and a witness outside the data dir), verified four ways.

- pinned key + witness: found, with the right kind, at the right position;
- neither: found too, or at least never passed as anchored (``anchored: false``);
- the node's start-up check (opening the journal for writing with its key and witness): the
  attacks that leave a consistent chain (rewrites, deleted or re-signed checkpoints, cuts) are
  refused there, so the node never signs over them; the rest (an edit between two older
  checkpoints) is found by the full verification the node runs while it serves, before it
  signs anything, and the node stops;
- a real ``reel node`` on a rewritten journal refuses to start (exit 2, one line), and one on
  a journal edited between checkpoints stops by itself (exit 2, one line).

The default run holds every attack in process (a few hundredths of a second each) and one real
node refusing to start; the other two real nodes are marked ``slow`` (``make test-slow``).

The pristine journal: 131 events, checkpoint rows at 42, 83, 124 and 135 (the head).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events import Journal, JournalReader, JournalTampered, NodeKey, VerifyReport, Witness, verify
from events.catalog import RunOutput
from events.codec import encode
from events.witness import read_notes
from tests import processes
from tests.events.conftest import Pristine
from tests.events.journal_testkit import (
    KEY,
    checkpoint_rows,
    delete_checkpoints,
    fetch_row,
    insert_row,
    renumber_dense,
    replace_payload,
    reseal,
    seal,
    shift_positions,
    tamper,
)

REEL = Path(sys.executable).with_name("reel")
FORGED = encode(RunOutput(run_id="x", turn=0, text="history, rewritten"))
CHECKPOINTS = [42, 83, 124, 135]
HEAD = 135


def alter_payload(conn: apsw.Connection) -> None:
    payload = fetch_row(conn, 57)["payload"]
    assert isinstance(payload, bytes)
    conn.execute(
        "UPDATE events SET payload = ? WHERE position = 57",
        (payload[:-1] + bytes([payload[-1] ^ 1]),),
    )


def alter_envelope(conn: apsw.Connection) -> None:
    conn.execute("UPDATE events SET principal = 'user:mallory' WHERE position = 33")


def delete_row(conn: apsw.Connection) -> None:
    conn.execute("DELETE FROM events WHERE position = 50")


def insert_row_sealed(conn: apsw.Connection) -> None:
    template = fetch_row(conn, 60)
    prev = fetch_row(conn, 59)["hash"]
    assert isinstance(prev, bytes)
    forged = {**template, "stream": "run/forged", "stream_seq": 0, "payload": FORGED}
    shift_positions(conn, 60, +1)
    insert_row(conn, seal({**forged, "kind": "run.output", "version": 1}, prev))


def reorder_rows(conn: apsw.Connection) -> None:
    conn.execute("UPDATE events SET position = -1 WHERE position = 20")
    conn.execute("UPDATE events SET position = 20 WHERE position = 21")
    conn.execute("UPDATE events SET position = 21 WHERE position = -1")


def row_at(position: int) -> Callable[[apsw.Connection], None]:
    def attack(conn: apsw.Connection) -> None:
        insert_row(conn, {**fetch_row(conn, 5), "position": position, "stream_seq": 9_999})

    return attack


def truncate_across_a_checkpoint(conn: apsw.Connection) -> None:
    conn.execute("DELETE FROM events WHERE position > 100")  # takes rows 124 and 135 along


def delete_one_checkpoint(conn: apsw.Connection) -> None:
    conn.execute("DELETE FROM events WHERE position = 83")


def delete_one_checkpoint_and_reseal(conn: apsw.Connection) -> None:
    conn.execute("DELETE FROM events WHERE position = 83")
    renumber_dense(conn)
    reseal(conn, 83)


def delete_all_checkpoints(conn: apsw.Connection) -> None:
    delete_checkpoints(conn)


def delete_all_checkpoints_and_reseal(conn: apsw.Connection) -> None:
    delete_checkpoints(conn, renumber=True)
    reseal(conn, 1)


def rewrite_from_57(conn: apsw.Connection) -> None:
    replace_payload(conn, 57, FORGED, "run.output")
    reseal(conn, 57)


def rewrite_from_57_dropping_later_checkpoints(conn: apsw.Connection) -> None:
    replace_payload(conn, 57, FORGED, "run.output")
    conn.execute("DELETE FROM events WHERE kind = 'journal.checkpoint' AND position > 57")
    renumber_dense(conn)
    reseal(conn, 57)


ATTACKER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


def resign_with_another_key(conn: apsw.Connection) -> None:
    reseal(conn, 1, resign=ATTACKER)


def rewrite_and_resign_with_another_key(conn: apsw.Connection) -> None:
    replace_payload(conn, 57, FORGED, "run.output")
    reseal(conn, 57, resign=ATTACKER)


def rewrite_and_resign_with_node_key(data: Path) -> Callable[[apsw.Connection], None]:
    """The attacker holds the whole data dir, node.key included."""

    def attack(conn: apsw.Connection) -> None:
        key = serialization.load_pem_private_key((data / KEY).read_bytes(), password=None)
        replace_payload(conn, 57, FORGED, "run.output")
        reseal(conn, 57, resign=key)

    return attack


# (id, attack, expected (kind, position) with a pinned key and the witness, caught at start)
MATRIX: list[tuple[str, object, tuple[str, int], bool]] = [
    ("alter-payload", alter_payload, ("altered_payload", 57), False),
    ("alter-envelope", alter_envelope, ("altered_envelope", 33), False),
    ("delete-row", delete_row, ("deleted_row", 50), True),
    ("insert-row", insert_row_sealed, ("inserted_row", 60), True),
    ("reorder-rows", reorder_rows, ("reordered_rows", 20), False),
    ("row-at-0", row_at(0), ("row_out_of_range", 0), True),
    ("row-at-minus-5", row_at(-5), ("row_out_of_range", -5), True),
    ("row-at-min-int64", row_at(-(2**63)), ("row_out_of_range", -(2**63)), True),
    ("row-beyond-head", row_at(HEAD + 5), ("deleted_row", HEAD + 1), True),
    ("truncate-across-checkpoint", truncate_across_a_checkpoint, ("truncated_tail", 101), True),
    ("delete-one-checkpoint", delete_one_checkpoint, ("deleted_row", 83), True),
    (
        "delete-one-checkpoint-resealed",
        delete_one_checkpoint_and_reseal,
        ("missing_checkpoint", 83),
        True,
    ),
    ("delete-all-checkpoints", delete_all_checkpoints, ("deleted_row", 42), True),
    (
        "delete-all-checkpoints-resealed",
        delete_all_checkpoints_and_reseal,
        ("missing_checkpoint", 42),
        True,
    ),
    ("rewrite-from-57", rewrite_from_57, ("rewritten_chain", 82), True),
    (
        "rewrite-from-57-checkpoints-dropped",
        rewrite_from_57_dropping_later_checkpoints,
        ("rewritten_chain", 82),
        True,
    ),
    ("resign-another-key", resign_with_another_key, ("bad_checkpoint_signature", 42), True),
    (
        "rewrite-resign-another-key",
        rewrite_and_resign_with_another_key,
        ("rewritten_chain", 82),
        True,
    ),
    ("rewrite-resign-node-key", "node-key", ("rewritten_chain", 82), True),
]


def check(path: Path, key: NodeKey | None, witness: Path | None) -> VerifyReport:
    reader = JournalReader.open(path)
    try:
        notes = read_notes(witness)[0] if witness is not None else None
        return verify(reader, trusted_public_key=key.public_key if key else None, witness=notes)
    finally:
        reader.close()


def attack_of(entry: object, data: Path) -> Callable[[apsw.Connection], None]:
    if entry == "node-key":
        return rewrite_and_resign_with_node_key(data)
    assert callable(entry)
    return entry


@pytest.mark.parametrize(
    ("attack", "expected", "at_start"),
    [pytest.param(a, e, s, id=name) for name, a, e, s in MATRIX],
)
def test_tamper_matrix(
    journal_copy: Path,
    pristine: Pristine,
    attack: object,
    expected: tuple[str, int],
    at_start: bool,
) -> None:
    with tamper(journal_copy) as conn:
        assert checkpoint_rows(conn) == CHECKPOINTS
        attack_of(attack, journal_copy.parent)(conn)
    anchored = check(journal_copy, pristine.key, pristine.witness)
    assert not anchored.ok, "not detected with a pinned key and the witness"
    assert anchored.fault is not None
    assert (anchored.fault.kind, anchored.fault.position) == expected, anchored.fault
    assert str(expected[1]) in anchored.fault.message or expected[0] == "truncated_tail"
    loose = check(journal_copy, None, None)
    assert not loose.ok or (not loose.anchored and loose.anchor == "unanchored"), loose
    # The node's own check before it serves: what leaves a consistent chain is refused there;
    # the rest is found by the full verification it runs while serving, before any signature.
    heard: list[JournalTampered] = []
    found = threading.Event()

    def on_tampered(error: JournalTampered) -> None:
        heard.append(error)
        found.set()

    try:
        journal = Journal(
            journal_copy,
            node_key=NodeKey.load(journal_copy.parent / KEY),
            witness=Witness.open(pristine.witness),
            on_tampered=on_tampered,
        )
    except JournalTampered as refused:
        assert at_start, f"refused at start although not expected: {refused}"
        assert "reel journal verify" in str(refused) and "\n" not in str(refused)
        return
    assert not at_start, "the node would have opened this journal"
    head = journal.head()
    try:
        assert found.wait(30), "the full verification did not report the fault"
        assert (heard[0].kind, heard[0].position) == expected
        with pytest.raises(JournalTampered):
            journal.checkpoint()
    finally:
        journal.close()
    reader = JournalReader.open(journal_copy)
    try:
        assert reader.head() == head  # nothing signed over it, not even at close
    finally:
        reader.close()


def test_the_witness_alone_catches_what_a_pinned_key_cannot(
    journal_copy: Path, pristine: Pristine
) -> None:
    """Someone holding node.key rewrites and signs again: the pinned key is satisfied (the
    report says so, and that it is anchored by the key only); the witness is not."""
    with tamper(journal_copy) as conn:
        rewrite_and_resign_with_node_key(journal_copy.parent)(conn)
    pinned = check(journal_copy, pristine.key, None)
    assert pinned.ok and pinned.anchor == "pinned key"
    witnessed = check(journal_copy, None, pristine.witness)
    assert witnessed.fault is not None
    assert (witnessed.fault.kind, witnessed.fault.position) == ("rewritten_chain", 82)


@pytest.mark.parametrize(
    "attack",
    [
        pytest.param(rewrite_from_57_dropping_later_checkpoints, marks=pytest.mark.slow),
        "node-key",
        pytest.param(resign_with_another_key, marks=pytest.mark.slow),
    ],
    ids=["rewrite-drop-checkpoints", "rewrite-resign-node-key", "resign-another-key"],
)
def test_a_real_node_refuses_to_start_and_sign(
    journal_copy: Path, pristine: Pristine, tmp_path: Path, attack: object
) -> None:
    """``reel node`` with its witness configured, on a journal rewritten by someone who holds
    the data dir: exit 2 with one line naming the position and how to investigate; nothing
    appended, nothing signed."""
    witness = tmp_path / "witness.notes"
    witness.write_bytes(pristine.witness.read_bytes())
    data = journal_copy.parent
    with tamper(journal_copy) as conn:
        attack_of(attack, data)(conn)
    if attack is resign_with_another_key:  # and put the attacker's key where node.key was
        (data / KEY).write_bytes(
            ATTACKER.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    before = journal_copy.read_bytes()
    done = processes.run(
        [str(REEL), "node", "--data", str(data)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **os.environ,
            "REEL_HTTP_PORT": "0",
            "REEL_GRPC_PORT": "0",
            "REEL_JOURNAL_WITNESS": str(witness),
        },
    )
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("reel: error: ") and "Traceback" not in done.stderr
    assert "position" in line and f"reel journal verify --data {data}" in line, line
    assert journal_copy.read_bytes() == before
    assert witness.read_bytes() == pristine.witness.read_bytes()


def test_a_real_node_stops_serving_a_journal_edited_between_checkpoints(
    journal_copy: Path, pristine: Pristine, tmp_path: Path
) -> None:
    """The start-up check does not re-hash rows between older checkpoints; the full walk the
    node runs while serving does, and the node stops (exit 2, the same kind of line) without
    signing anything."""
    witness = tmp_path / "witness.notes"
    witness.write_bytes(pristine.witness.read_bytes())
    with tamper(journal_copy) as conn:
        alter_payload(conn)
    done = processes.run(
        [str(REEL), "node", "--data", str(journal_copy.parent)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **os.environ,
            "REEL_HTTP_PORT": "0",
            "REEL_GRPC_PORT": "0",
            "REEL_JOURNAL_WITNESS": str(witness),
        },
    )
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("reel: error: journal ") and "position 57" in last, last
    assert "reel journal verify --data" in last and "Traceback" not in done.stderr
    reader = JournalReader.open(journal_copy)
    try:
        # Nothing signed: background work may have appended (a reflection task for a run it
        # found), but no checkpoint vouches for the altered row, and verify still finds it.
        after = [r.kind for r in reader.read(after_position=HEAD)]
        assert "journal.checkpoint" not in after, after
    finally:
        reader.close()
    assert witness.read_bytes() == pristine.witness.read_bytes()


def test_a_real_node_writes_its_witness(tmp_path: Path) -> None:
    """A running node appends each checkpoint to its witness; the journal it leaves verifies
    anchored by the pinned key and the witness."""
    data, witness = tmp_path / "data", tmp_path / "outside" / "witness.notes"
    witness.parent.mkdir()
    env = {
        **os.environ,
        "REEL_HTTP_PORT": "0",
        "REEL_GRPC_PORT": "0",
        "REEL_JOURNAL_WITNESS": str(witness),
        "REEL_JOURNAL_CHECKPOINT_EVERY_EVENTS": "3",
    }
    with processes.node(
        "--data",
        data,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as node:
        try:
            assert node.stdout is not None
            ready = node.stdout.readline()
            assert ready.startswith("reel node ready"), ready
            address = ready.split("gRPC ")[1].split()[0]
            over_grpc = processes.run(
                [str(REEL), "chat", "--data", str(data), "--address", address, "say hi"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            assert over_grpc.returncode == 0, over_grpc.stdout + over_grpc.stderr
            chat = processes.run(
                [str(REEL), "chat", "--local", "--data", str(tmp_path / "other"), "hello"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
                env=env | {"REEL_JOURNAL_WITNESS": str(tmp_path / "other-witness.notes")},
            )
            assert chat.returncode == 0, chat.stdout + chat.stderr
        finally:
            node.terminate()
            _, err = node.communicate(timeout=60)
    assert node.returncode == 0, err
    notes = read_notes(witness)[0]
    assert len(notes) >= 2  # every 3 rows during the run, and the final one before exit
    pem = tmp_path / "node.pub"
    pem.write_text(NodeKey.load(data / KEY).public_pem())
    done = subprocess.run(
        [
            str(REEL),
            "journal",
            "verify",
            "--data",
            str(data),
            "--public-key",
            str(pem),
            "--witness",
            str(witness),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "anchored by pinned key + witness" in done.stdout
    # reel chat --local composes a node too: it wrote its own witness, for its own data dir.
    local = read_notes(tmp_path / "other-witness.notes")[0]
    assert len(local) >= 2  # every 3 rows during the run, and at close
    assert local[-1].origin == NodeKey.load(tmp_path / "other" / KEY).origin
