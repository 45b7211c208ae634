"""docs/journal-format.md's worked example is what the code computes (a document that drifts
from the code is worse than none)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import msgspec

from events import GENESIS
from events.catalog import RunOutput
from events.chain import identity_bytes, payload_digest, row_hash
from events.checkpoint import signed_message
from events.codec import encode
from events.schema import APPLICATION_ID, SCHEMA_VERSION

DOC = Path(__file__).parents[2] / "docs" / "journal-format.md"


def example() -> dict[str, bytes]:
    """The labelled hex values of the worked example's code block."""
    text = DOC.read_text(encoding="utf-8").split("## 9. Worked example", 1)[1]
    block = text.split("```", 2)[1]
    values: dict[str, bytes] = {}
    label = ""
    for line in block.strip().splitlines():
        if re.fullmatch(r"[0-9a-f ]+", line.strip()):
            values[label] = values.get(label, b"") + bytes.fromhex(line.replace(" ", ""))
        elif line.strip():
            label = line.split("(")[0].split("=")[0].strip()
    return values


def test_worked_example_matches_the_code() -> None:
    values = example()
    payload = encode(RunOutput(run_id="r1", turn=0, text="hi"))
    identity = identity_bytes(
        1,
        "01J9ZQ6Y2W6S3B7R5X8K4M2N1P",
        "run/r1",
        0,
        "run.output",
        1,
        1700000000000,
        "system",
        "r1",
        None,
    )
    digest = row_hash(GENESIS, identity, payload)
    assert values["payload"] == payload
    assert values["identity"] == identity
    assert values["prev_hash"] == GENESIS
    assert values["hash"] == digest == hashlib.sha256(GENESIS + identity + payload).digest()
    assert values["payload_sha256"] == payload_digest(payload)
    assert values["checkpoint signed message for"] == signed_message(1, digest)
    assert len(signed_message(1, digest)) == 59
    assert msgspec.msgpack.decode(payload) == {
        "kind": "run.output",
        "redacted": 0,
        "run_id": "r1",
        "turn": 0,
        "text": "hi",
    }


def test_file_identity_matches_the_code() -> None:
    doc = DOC.read_text(encoding="utf-8")
    assert f"`{APPLICATION_ID:#010X}`".replace("0X", "0x") in doc
    assert f"Schema version: **{SCHEMA_VERSION}**" in doc
