"""Re-verify a ``reel journal export`` file without reel, from docs/journal-format.md alone.

Usage: ``python independent_verify.py EXPORT.ndjson [--public-key HEX]``

Uses only the Python standard library (json, hashlib, base64, struct). It checks, line by line:
positions dense from 1, each ``prev_hash`` equal to the previous line's ``hash`` (32 zero bytes
for position 1), each ``hash`` equal to SHA-256(prev_hash || identity || payload) recomputed
from the exported fields, and each checkpoint's ``hash`` equal to the event hash at its
position (and its position not past the end: a truncated tail).

OPTIONAL: with ``--public-key`` and the third-party ``cryptography`` package importable, it also
checks each checkpoint's Ed25519 signature over ``b"reel.checkpoint.v1\\x00" || position (u64
BE) || hash``. Without ``cryptography`` that step is skipped and says so.

Exit 0 and ``ok: ...`` when everything holds; exit 1 and ``line N: ...`` naming the first bad
line otherwise; exit 2 for an unreadable file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys

GENESIS = bytes(32)
ABSENT = b"\xff\xff\xff\xff"
DOMAIN = b"reel.checkpoint.v1\x00"


class Bad(Exception):
    """The first problem found, with the 1-based line number it is on."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")


def i64(value: object) -> bytes:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return struct.pack(">q", value)


def text(value: object) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    data = value.encode("utf-8")
    return struct.pack(">I", len(data)) + data


def optional_text(value: object) -> bytes:
    return ABSENT if value is None else text(value)


def identity(record: dict[str, object]) -> bytes:
    """The envelope fields in hash order (docs/journal-format.md, "The hash input")."""
    return b"".join(
        (
            i64(record["position"]),
            text(record["event_id"]),
            text(record["stream"]),
            i64(record["stream_seq"]),
            text(record["kind"]),
            i64(record["version"]),
            i64(record["recorded_at_ms"]),
            text(record["principal"]),
            optional_text(record["correlation_id"]),
            optional_text(record["causation_id"]),
        )
    )


def check_signature(line: int, record: dict[str, object], public_key: bytes) -> None:
    # OPTIONAL, and the only non-standard-library code here.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    position, hash_ = record["position"], bytes.fromhex(str(record["hash"]))
    if bytes.fromhex(str(record["public_key"])) != public_key:
        raise Bad(line, f"checkpoint {position} was signed by another key")
    message = DOMAIN + struct.pack(">Q", position) + hash_
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(
            bytes.fromhex(str(record["signature"])), message
        )
    except InvalidSignature:
        raise Bad(line, f"checkpoint {position} has a bad signature") from None


def verify_export(lines: list[str], public_key: bytes | None) -> str:
    hashes: dict[int, bytes] = {}
    prev = GENESIS
    expected = 1
    checkpoints = 0
    signatures = "not checked (no --public-key)"
    if public_key is not None:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            public_key = None
            signatures = "SKIPPED (the optional 'cryptography' package is not installed)"
        else:
            signatures = "checked"
    for number, raw in enumerate(lines, start=1):
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise Bad(number, f"not JSON: {exc}") from None
        try:
            if record["record"] == "event":
                if record["position"] != expected:
                    raise Bad(number, f"position {record['position']}, expected {expected}")
                stated_prev = bytes.fromhex(record["prev_hash"])
                if stated_prev != prev:
                    raise Bad(number, f"prev_hash does not match the hash of line {number - 1}")
                payload = base64.b64decode(record["payload_b64"], validate=True)
                digest = hashlib.sha256(prev + identity(record) + payload).digest()
                if digest.hex() != record["hash"]:
                    raise Bad(number, f"hash of position {expected} does not match its content")
                hashes[expected] = digest
                prev = digest
                expected += 1
            elif record["record"] == "checkpoint":
                position = record["position"]
                if position not in hashes:
                    raise Bad(number, f"checkpoint {position} is past the end (truncated tail)")
                if hashes[position].hex() != record["hash"]:
                    raise Bad(number, f"checkpoint {position} disagrees with the chain")
                if public_key is not None:
                    check_signature(number, record, public_key)
                checkpoints += 1
            else:
                raise Bad(number, f"unknown record type {record['record']!r}")
        except (KeyError, TypeError, ValueError, struct.error) as exc:
            raise Bad(number, f"malformed record: {exc!r}") from None
    return (
        f"ok: {expected - 1} events, head {prev.hex()}, {checkpoints} checkpoints, "
        f"signatures {signatures}"
    )


def main(argv: list[str]) -> int:
    if not argv or len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--public-key"):
        print("usage: independent_verify.py EXPORT.ndjson [--public-key HEX]", file=sys.stderr)
        return 2
    key = bytes.fromhex(argv[2]) if len(argv) == 3 else None
    try:
        with open(argv[0], encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        print(f"cannot read {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        print(verify_export(lines, key))
    except Bad as bad:
        print(f"FAILED: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
