"""Re-verify a ``reel journal export`` file without reel, from docs/journal-format.md alone.

Usage: ``python independent_verify.py EXPORT.ndjson [--public-key HEX] [--witness FILE]``

Uses only the Python standard library (json, hashlib, base64, struct). It checks, line by line:
positions dense from 1, each ``prev_hash`` equal to the previous line's ``hash`` (32 zero bytes
for position 1), each ``hash`` equal to SHA-256(prev_hash || identity || payload) recomputed
from the exported fields, and each checkpoint row (kind ``journal.checkpoint``, its msgpack
payload decoded here by hand): on stream ``journal`` with ``stream_seq`` counting the
checkpoints, covering the row right before it (``size`` and ``hash``), naming the previous
checkpoint row (``previous``), and signed under the origin its public key implies. The
``"record": "checkpoint"`` lines must repeat checkpoint rows exactly. With ``--witness``, every
note in the witness file must be a checkpoint row of the export, same size, hash and signature.

OPTIONAL: with ``--public-key`` (the pinned key, 64 hex digits) and the third-party
``cryptography`` package importable, it also checks every checkpoint's Ed25519 signature over
the note body ``origin\\nsize\\nbase64(hash)\\n`` against that key only. Without ``cryptography``
that step is skipped and says so. Without a pinned key or a witness the result says
``UNANCHORED``: nothing ties the journal to anything outside the file.

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
CHECKPOINT_FIELDS = (
    "kind",
    "redacted",
    "origin",
    "size",
    "hash",
    "previous",
    "public_key",
    "signature",
)
SIGNATURE_PREFIX = "\u2014 "


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


def blob(value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"expected a byte string, got {value!r}")
    return value


def optional_text(value: object) -> bytes:
    return ABSENT if value is None else text(value)


def identity(record: dict[str, object]) -> bytes:
    """The envelope fields in hash order (docs/journal-format.md, section 3)."""
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


# --- the little MessagePack a checkpoint payload uses (docs/journal-format.md, section 6) ------


def unpack(data: bytes) -> dict[str, object]:
    """Decode a checkpoint payload: a map of string keys to strings, unsigned integers and
    byte strings. Anything else is malformed (ValueError)."""
    value, end = _value(data, 0)
    if end != len(data) or not isinstance(value, dict):
        raise ValueError("the payload is not exactly one msgpack map")
    return value


def _value(data: bytes, at: int) -> tuple[object, int]:
    tag = data[at]
    if tag <= 0x7F:
        return tag, at + 1
    if 0x80 <= tag <= 0x8F or tag == 0xDE:
        count, at = (tag & 0x0F, at + 1) if tag != 0xDE else (_uint(data, at + 1, 2), at + 3)
        out: dict[str, object] = {}
        for _ in range(count):
            key, at = _value(data, at)
            if not isinstance(key, str):
                raise ValueError("a map key is not a string")
            out[key], at = _value(data, at)
        return out, at
    if 0xA0 <= tag <= 0xBF:
        return _str(data, at + 1, tag & 0x1F)
    widths = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
    if tag in widths:
        return _uint(data, at + 1, widths[tag]), at + 1 + widths[tag]
    strings = {0xD9: 1, 0xDA: 2}
    if tag in strings:
        return _str(data, at + 1 + strings[tag], _uint(data, at + 1, strings[tag]))
    blobs = {0xC4: 1, 0xC5: 2}
    if tag in blobs:
        size = _uint(data, at + 1, blobs[tag])
        start = at + 1 + blobs[tag]
        if start + size > len(data):
            raise ValueError("a byte string runs past the payload")
        return data[start : start + size], start + size
    raise ValueError(f"msgpack type 0x{tag:02x} does not belong in a checkpoint")


def _uint(data: bytes, at: int, width: int) -> int:
    if at + width > len(data):
        raise ValueError("an integer runs past the payload")
    return int.from_bytes(data[at : at + width], "big")


def _str(data: bytes, at: int, size: int) -> tuple[str, int]:
    if at + size > len(data):
        raise ValueError("a string runs past the payload")
    return data[at : at + size].decode("utf-8"), at + size


def note_body(origin: str, size: int, hash_: bytes) -> bytes:
    return f"{origin}\n{size}\n{base64.b64encode(hash_).decode()}\n".encode()


def origin_for(public_key: bytes) -> str:
    return "reel.journal/" + hashlib.sha256(public_key).hexdigest()[:16]


def check_signature(line: int, fields: dict[str, object], public_key: bytes) -> None:
    # OPTIONAL, and the only non-standard-library code here.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if fields["public_key"] != public_key:
        raise Bad(line, f"checkpoint covering {fields['size']} was signed by another key")
    body = note_body(str(fields["origin"]), int(str(fields["size"])), blob(fields["hash"]))
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(blob(fields["signature"]), body)
    except InvalidSignature:
        raise Bad(line, f"checkpoint covering {fields['size']} has a bad signature") from None


def witness_notes(path: str) -> list[tuple[str, int, bytes, bytes]]:
    """``(origin, size, hash, signature)`` of every complete note in a witness file."""
    with open(path, encoding="utf-8") as file:
        data = file.read()
    notes: list[tuple[str, int, bytes, bytes]] = []
    offset = 0
    while True:
        body_end = data.find("\n\n", offset)
        end = data.find("\n\n", body_end + 2) if body_end >= 0 else -1
        if end < 0:
            return notes
        origin, size, hash_b64 = data[offset:body_end].split("\n")[:3]
        signature_line = data[body_end + 2 : end].split("\n")[0]
        if not signature_line.startswith(SIGNATURE_PREFIX):
            raise ValueError(f"witness entry {len(notes) + 1} has no signature line")
        raw = base64.b64decode(signature_line.split(" ")[-1], validate=True)
        notes.append((origin, int(size), base64.b64decode(hash_b64, validate=True), raw[4:]))
        offset = end + 2


def verify_export(
    lines: list[str],
    public_key: bytes | None,
    witness: list[tuple[str, int, bytes, bytes]] | None,
) -> str:
    hashes: dict[int, bytes] = {}
    checkpoints: dict[int, dict[str, object]] = {}
    prev = GENESIS
    expected = 1
    last_row = 0
    signer = public_key
    records = 0
    signatures = "not checked (no --public-key)"
    if public_key is not None:
        try:
            import cryptography  # noqa: F401
        except ImportError:
            public_key = None
            signatures = "SKIPPED (the optional 'cryptography' package is not installed)"
        else:
            signatures = "checked against the pinned key"
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
                if record["kind"] == "journal.checkpoint" or record["stream"] == "journal":
                    fields = unpack(payload)
                    if (
                        record["kind"] != "journal.checkpoint"
                        or record["stream"] != "journal"
                        or tuple(fields) != CHECKPOINT_FIELDS
                    ):
                        raise Bad(number, f"row {expected} is not a well-formed checkpoint")
                    if fields["size"] != expected - 1 or fields["hash"] != prev:
                        raise Bad(number, f"checkpoint at {expected} disagrees with the chain")
                    if fields["previous"] != last_row or record["stream_seq"] != len(checkpoints):
                        raise Bad(number, f"checkpoint at {expected} does not follow the last one")
                    key = blob(fields["public_key"])
                    signer = signer or key
                    if key != signer or fields["origin"] != origin_for(key):
                        raise Bad(number, f"checkpoint at {expected} was signed by another key")
                    if public_key is not None:
                        check_signature(number, fields, public_key)
                    checkpoints[expected] = fields
                    last_row = expected
                hashes[expected] = digest
                prev = digest
                expected += 1
            elif record["record"] == "checkpoint":
                records += 1
                fields = checkpoints.get(record["row_position"], {})
                if (
                    fields.get("size") != record["position"]
                    or blob(fields.get("hash", b"")).hex() != record["hash"]
                    or blob(fields.get("signature", b"")).hex() != record["signature"]
                ):
                    raise Bad(number, f"checkpoint {record['position']} disagrees with the chain")
            else:
                raise Bad(number, f"unknown record type {record['record']!r}")
        except (KeyError, TypeError, ValueError, IndexError, struct.error) as exc:
            raise Bad(number, f"malformed record: {exc!r}") from None
    if records != len(checkpoints):
        raise Bad(len(lines), f"{len(checkpoints)} checkpoint rows but {records} records")
    for origin, size, hash_, signature in witness or ():
        fields = checkpoints.get(size + 1, {})
        if not fields:
            raise Bad(len(lines), f"the witnessed checkpoint at {size + 1} is not in the export")
        if (
            fields["origin"] != origin
            or fields["hash"] != hash_
            or fields["signature"] != signature
        ):
            raise Bad(len(lines), f"the witnessed checkpoint at {size + 1} differs")
    anchors = [
        name
        for name, on in (("pinned key", public_key is not None), ("witness", bool(witness)))
        if on
    ]
    return (
        f"ok: {expected - 1} events, head {prev.hex()}, {len(checkpoints)} checkpoints, "
        f"signatures {signatures}, {' + '.join(anchors) if anchors else 'UNANCHORED'}"
    )


def main(argv: list[str]) -> int:
    args = list(argv)
    options: dict[str, str] = {}
    while len(args) >= 2 and args[-2] in ("--public-key", "--witness"):
        options[args[-2]] = args[-1]
        del args[-2:]
    if len(args) != 1:
        print(
            "usage: independent_verify.py EXPORT.ndjson [--public-key HEX] [--witness FILE]",
            file=sys.stderr,
        )
        return 2
    key = bytes.fromhex(options["--public-key"]) if "--public-key" in options else None
    try:
        with open(args[0], encoding="utf-8") as file:
            lines = file.read().splitlines()
        witness = witness_notes(options["--witness"]) if "--witness" in options else None
    except (OSError, ValueError) as exc:
        print(f"cannot read: {exc}", file=sys.stderr)
        return 2
    try:
        print(verify_export(lines, key, witness))
    except Bad as bad:
        print(f"FAILED: {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
