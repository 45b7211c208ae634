"""Issue 11, finding 1, one test per hole, against the real ``reel journal verify`` and
``reel node`` (written before the fix, when each of them failed):

- deleting the checkpoints passed verify;
- deleting them and rewriting the chain from any position (recomputed hashes) passed verify;
- a node started on such a journal signed a fresh checkpoint over the forged head;
- verify could not be told which public key to trust (it took ``node.key`` from the data dir);
- a row at a position below 1 was never scanned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events import JournalReader, NodeKey
from events.catalog import RunOutput
from events.codec import encode
from tests import processes
from tests.events.journal_testkit import (
    JOURNAL,
    KEY,
    build_journal,
    checkpoint_rows,
    delete_checkpoints,
    fetch_row,
    insert_row,
    replace_payload,
    reseal,
    tamper,
)

REEL = Path(sys.executable).with_name("reel")
FORGED = RunOutput(run_id="x", turn=0, text="history, rewritten")


def reel(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [str(REEL), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def public_pem(key: NodeKey, path: Path) -> Path:
    """The key's public half as a SubjectPublicKeyInfo PEM file (what ``reel journal pubkey``
    prints)."""
    public = Ed25519PublicKey.from_public_bytes(key.public_key)
    path.write_bytes(
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


class Witnessed:
    """A closed journal written with a witness outside its data dir, and the pinned key."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.witness = root / "elsewhere" / "witness.notes"
        self.witness.parent.mkdir(parents=True)
        self.key = build_journal(self.data, witness=self.witness)
        self.pem = public_pem(self.key, root / "node.pub.pem")

    @property
    def journal(self) -> Path:
        return self.data / JOURNAL

    def verify(self, *, anchored: bool = True) -> subprocess.CompletedProcess[str]:
        extra = ("--public-key", self.pem, "--witness", self.witness) if anchored else ()
        return reel("journal", "verify", "--data", self.data, "--json", *extra)


@pytest.fixture
def witnessed(tmp_path: Path) -> Witnessed:
    return Witnessed(tmp_path)


def fault_of(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    fault = report["fault"]
    assert isinstance(fault, dict)
    return fault


def test_deleting_the_checkpoints_is_found(witnessed: Witnessed) -> None:
    with tamper(witnessed.journal) as conn:
        first = delete_checkpoints(conn)[0]
    for anchored in (False, True):
        fault = fault_of(witnessed.verify(anchored=anchored))
        assert (fault["kind"], fault["position"]) == ("deleted_row", first)


def test_checkpoints_deleted_and_the_chain_rewritten_is_found(witnessed: Witnessed) -> None:
    with tamper(witnessed.journal) as conn:
        first = checkpoint_rows(conn)[0]
        delete_checkpoints(conn, renumber=True)
        replace_payload(conn, 57, encode(FORGED), "run.output")
        reseal(conn, 1)
    # Nothing in the data dir can tell: verify passes, but says it proved nothing.
    loose = witnessed.verify(anchored=False)
    assert loose.returncode == 0, loose.stdout + loose.stderr
    report = json.loads(loose.stdout)
    assert report["ok"] is True and report["anchored"] is False
    human = reel("journal", "verify", "--data", witnessed.data)
    assert human.returncode == 0 and "UNANCHORED" in human.stdout
    # The witness outside the data dir recorded the first checkpoint: it is gone.
    fault = fault_of(witnessed.verify())
    assert (fault["kind"], fault["position"]) == ("missing_checkpoint", first)


def node_env(witness: Path | None) -> dict[str, str]:
    env = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    if witness is not None:
        env["REEL_JOURNAL_WITNESS"] = str(witness)
    return env


def head_of(path: Path) -> tuple[int, bytes]:
    reader = JournalReader.open(path)
    try:
        head = reader.head()
        return head.position, head.hash
    finally:
        reader.close()


@pytest.mark.parametrize("deleted", [False, True], ids=["resealed", "checkpoints-deleted"])
def test_a_node_refuses_to_sign_over_a_forged_head(witnessed: Witnessed, deleted: bool) -> None:
    with tamper(witnessed.journal) as conn:
        if deleted:
            delete_checkpoints(conn, renumber=True)
        replace_payload(conn, 57, encode(FORGED), "run.output")
        reseal(conn, 57)
    before = head_of(witnessed.journal)
    started = reel("node", "--data", witnessed.data, env=node_env(witnessed.witness))
    assert started.returncode == 2, started.stdout + started.stderr
    lines = started.stderr.strip().splitlines()
    assert len(lines) == 1, started.stderr
    assert "Traceback" not in started.stderr
    assert "position" in lines[0] and "reel journal verify" in lines[0], lines[0]
    assert head_of(witnessed.journal) == before  # nothing signed, nothing appended


def test_verify_trusts_the_key_it_is_given_not_the_data_dir(witnessed: Witnessed) -> None:
    attacker = Ed25519PrivateKey.generate()
    with tamper(witnessed.journal) as conn:
        first = checkpoint_rows(conn)[0]
        replace_payload(conn, 57, encode(FORGED), "run.output")
        reseal(conn, 1, resign=attacker)
    (witnessed.data / KEY).write_bytes(  # the attacker's key where node.key was
        attacker.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pinned = reel(
        "journal", "verify", "--data", witnessed.data, "--json", "--public-key", witnessed.pem
    )
    fault = fault_of(pinned)
    assert (fault["kind"], fault["position"]) == ("bad_checkpoint_signature", first)
    loose = witnessed.verify(anchored=False)
    assert loose.returncode == 0
    assert json.loads(loose.stdout)["anchored"] is False


@pytest.mark.parametrize("position", [0, -1, -(2**63)])
def test_a_row_below_position_1_is_tampering(witnessed: Witnessed, position: int) -> None:
    with tamper(witnessed.journal) as conn:
        row = fetch_row(conn, 5)
        insert_row(conn, {**row, "position": position, "stream_seq": 10_000})
    fault = fault_of(witnessed.verify(anchored=False))
    assert (fault["kind"], fault["position"]) == ("row_out_of_range", position)
