"""docs/journal-format.md's worked example is what the code computes (a document that drifts
from the code is worse than none), and a journal written from the document alone verifies."""

from __future__ import annotations

import hashlib
import random
import re
import subprocess
import sys
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from events import GENESIS, NodeKey
from events.catalog import RunOutput
from events.chain import (
    identity_bytes,
    kind_fields,
    link,
    payload_digest,
    recorded_at,
    request_fields,
    row_hash,
)
from events.codec import encode
from events.ids import new_id
from events.note import key_id, parse_checkpoint_note, verifier_key
from events.sqlite.schema import APPLICATION_ID, INDEXES, SCHEMA_VERSION
from events.witness import parse_witness
from tests.events import independent_verify

DOC = Path(__file__).parents[2] / "docs" / "journal-format.md"
EXAMPLE_KEY = NodeKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))


def worked_example() -> str:
    return DOC.read_text(encoding="utf-8").split("## 11. Worked example", 1)[1]


def example() -> dict[str, bytes]:
    """The labelled hex values of the worked example's first code block."""
    block = worked_example().split("```", 2)[1]
    values: dict[str, bytes] = {}
    label = ""
    for line in block.strip().splitlines():
        if re.fullmatch(r"[0-9a-f ]+", line.strip()):
            values[label] = values.get(label, b"") + bytes.fromhex(line.replace(" ", ""))
        elif line.strip():
            label = line.split("(")[0].split("=")[0].strip()
    return values


def text_block(marker: str) -> str:
    """The ```text block right after ``<!-- marker -->``."""
    after = worked_example().split(f"<!-- {marker} -->", 1)[1]
    return after.split("```text\n", 1)[1].split("```", 1)[0]


def rows() -> tuple[bytes, bytes, bytes, bytes, bytes]:
    """Row 1's payload, identity and hash; the checkpoint row's payload and identity."""
    payload = encode(RunOutput(run_id="r1", turn=0, text="hi"))
    identity = identity_bytes(
        1, "01J9ZQ6Y2W6S3B7R5X8K4M2N1P", "run/r1", 0, "run.output", 1, 1700000000000, "system",
        "r1", None,
    )  # fmt: skip
    digest = row_hash(GENESIS, identity, payload)
    checkpoint = EXAMPLE_KEY.sign(1, digest, 1700000000001)
    cp_payload = encode(checkpoint.event())
    cp_identity = identity_bytes(
        2, "01J9ZQ6Y2W6S3B7R5X8K4M2N1Q", "journal", 0, "journal.checkpoint", 1, 1700000000001,
        "system", None, None,
    )  # fmt: skip
    return payload, identity, digest, cp_payload, cp_identity


def test_worked_example_matches_the_code() -> None:
    values = example()
    payload, identity, digest, cp_payload, cp_identity = rows()
    assert values["payload"] == payload
    assert values["identity"] == identity
    assert values["prev_hash"] == GENESIS
    assert values["hash"] == digest == hashlib.sha256(GENESIS + identity + payload).digest()
    assert values["payload_sha256"] == payload_digest(payload)
    assert msgspec.msgpack.decode(payload) == {
        "kind": "run.output",
        "redacted": 0,
        "run_id": "r1",
        "turn": 0,
        "text": "hi",
    }
    key = EXAMPLE_KEY
    checkpoint = key.sign(1, digest, 1700000000001)
    assert values["public key"] == key.public_key
    assert values["key id"] == key_id(key.origin, key.public_key)
    assert (
        values["key id"]
        == hashlib.sha256(key.origin.encode() + b"\n\x01" + key.public_key).digest()[:4]
    )
    assert values["checkpoint note body"] == checkpoint.body()
    assert len(checkpoint.body()) == 77
    assert values["signature"] == checkpoint.signature
    assert values["checkpoint payload"] == cp_payload
    assert list(msgspec.msgpack.decode(cp_payload)) == list(independent_verify.CHECKPOINT_FIELDS)
    assert independent_verify.unpack(cp_payload) == msgspec.msgpack.decode(cp_payload)
    assert values["checkpoint identity"] == cp_identity
    assert values["checkpoint hash"] == row_hash(digest, cp_identity, cp_payload)


def test_worked_example_note_pem_and_verifier_key() -> None:
    _, _, digest, _, _ = rows()
    checkpoint = EXAMPLE_KEY.sign(1, digest, 1700000000001)
    note = text_block("note")
    assert note == checkpoint.note()
    parsed = parse_checkpoint_note(note)
    assert (parsed.origin, parsed.size, parsed.hash) == (EXAMPLE_KEY.origin, 1, digest)
    assert parsed.signed_by(EXAMPLE_KEY.public_key)
    assert parse_witness((note + "\n").encode())[0] == [parsed]
    assert text_block("pem") == EXAMPLE_KEY.public_pem()
    assert f"`{verifier_key(EXAMPLE_KEY.origin, EXAMPLE_KEY.public_key)}`" in worked_example()
    assert f"origin is `{EXAMPLE_KEY.origin}`" in worked_example()


def test_signed_note_matches_the_go_reference_vector() -> None:
    """golang.org/x/mod/sumdb/note's own example (key PeterNeumann): reel's signed-note code
    produces its signature line byte for byte, so Go's note.Open reads reel's witness."""
    import base64

    from events.note import format_note

    # The Go example's private key: PRIVATE+KEY+PeterNeumann+c74f20a3+<base64(0x01 || seed)>.
    seed = base64.b64decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")[1:]
    key = Ed25519PrivateKey.from_private_bytes(seed)
    public = NodeKey(key).public_key
    text = b"If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"  # noqa: E501
    note = format_note(text, "PeterNeumann", public, key.sign(text))
    assert note.endswith(
        "\n\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1"
        "FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
    )
    assert verifier_key("PeterNeumann", public) == (
        "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    )


def test_the_writers_one_hash_is_the_documented_row_hash() -> None:
    """The writer hashes each row with :func:`link` (fields encoded once per request, one
    hash over one join); every field shape gives the documented ``row_hash`` bytes."""
    rng = random.Random(23)
    texts = ["", "system", "run/01J", "sess/é/ünï", "日本語", "x" * 300, "user:a@b.c"]
    for _ in range(500):
        stream, principal, kind = (rng.choice(texts) for _ in range(3))
        correlation, causation = (rng.choice([None, *texts]) for _ in range(2))
        position, seq = rng.randrange(1, 1 << 62), rng.randrange(0, 1 << 40)
        version, at_ms = rng.randrange(1, 9), rng.randrange(0, 1 << 48)
        event_id = rng.choice([new_id(), "é" * 26, ""])
        prev, payload = rng.randbytes(32), rng.randbytes(rng.randrange(0, 200))
        stream_part, rest = request_fields(stream, principal, correlation, causation)
        identity = identity_bytes(
            position, event_id, stream, seq, kind, version, at_ms, principal, correlation, causation
        )
        assert link(
            prev,
            position,
            event_id,
            stream_part,
            seq,
            kind_fields(kind, version),
            recorded_at(at_ms),
            rest,
            payload,
        ) == row_hash(prev, identity, payload)


def test_file_identity_matches_the_code() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert f"`{APPLICATION_ID:#010X}`".replace("0X", "0x") in doc
    assert f"Schema version: **{SCHEMA_VERSION}**" in doc
    assert f"| `PRAGMA user_version` | `{SCHEMA_VERSION}` |" in doc


def test_every_index_a_writer_creates_is_in_the_document() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for statement in INDEXES:
        assert statement.replace("IF NOT EXISTS ", "") + ";" in doc


def test_the_independent_verifier_reads_a_journal_built_from_the_document(
    tmp_path: Path,
) -> None:
    """The worked example's two rows, exported by hand as section 10 says, pass the stdlib
    verifier with the example key pinned and its note as the witness."""
    import base64
    import json

    payload, _, digest, cp_payload, _ = rows()
    checkpoint_hash = example()["checkpoint hash"]
    common = {"record": "event", "version": 1, "principal": "system", "causation_id": None}
    lines = [
        {
            **common,
            "position": 1,
            "event_id": "01J9ZQ6Y2W6S3B7R5X8K4M2N1P",
            "stream": "run/r1",
            "stream_seq": 0,
            "kind": "run.output",
            "recorded_at_ms": 1700000000000,
            "correlation_id": "r1",
            "payload_b64": base64.b64encode(payload).decode(),
            "prev_hash": GENESIS.hex(),
            "hash": digest.hex(),
        },
        {
            **common,
            "position": 2,
            "event_id": "01J9ZQ6Y2W6S3B7R5X8K4M2N1Q",
            "stream": "journal",
            "stream_seq": 0,
            "kind": "journal.checkpoint",
            "recorded_at_ms": 1700000000001,
            "correlation_id": None,
            "payload_b64": base64.b64encode(cp_payload).decode(),
            "prev_hash": digest.hex(),
            "hash": checkpoint_hash.hex(),
        },
        {
            "record": "checkpoint",
            "position": 1,
            "hash": digest.hex(),
            "row_position": 2,
            "previous": 0,
            "origin": EXAMPLE_KEY.origin,
            "signed_at_ms": 1700000000001,
            "public_key": EXAMPLE_KEY.public_key.hex(),
            "signature": example()["signature"].hex(),
            "note": text_block("note"),
        },
    ]
    export = tmp_path / "example.ndjson"
    export.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    witness = tmp_path / "witness"
    witness.write_text(text_block("note") + "\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            str(Path(independent_verify.__file__)),
            str(export),
            "--public-key",
            EXAMPLE_KEY.public_key.hex(),
            "--witness",
            str(witness),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 2 events")
    assert done.stdout.rstrip().endswith("pinned key + witness")
