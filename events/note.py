"""Signed checkpoints as C2SP signed notes: the exact text reel signs and hands to its witness.

reel does not invent a format for "this log had this head": it uses the transparency-log
community's. A checkpoint's signed text is a tlog-checkpoint body (https://c2sp.org/tlog-checkpoint)::

    <origin>\\n
    <size>\\n
    <base64 hash>\\n

and the witness stores it as a signed note (https://c2sp.org/signed-note): the body, an empty
line, and one signature line ``"\\u2014 " <key name> " " base64(key id || signature) "\\n"`` where
the key name is the origin, the key id is the first 4 bytes of
``SHA-256(name || 0x0A || 0x01 || public key)`` and the signature is Ed25519 over the body.
Go's ``golang.org/x/mod/sumdb/note`` opens it with the verifier key :func:`verifier_key`.

One documented departure: ``hash`` is the hash-chain head (the ``hash`` of the row at position
``size``, docs/journal-format.md), not an RFC 6962 Merkle root, so no inclusion or consistency
proofs exist; a verifier checks a checkpoint against the rows themselves.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from functools import lru_cache

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ED25519 = 0x01
"""The signed-note signature type of Ed25519."""
SIGNATURE_PREFIX = "\u2014 "
"""An em dash (U+2014) and a space start every signature line."""
ORIGIN_PREFIX = "reel.journal/"

_NAME = re.compile(r"[^\s+]+")
_SIZE = re.compile(r"0|[1-9][0-9]{0,18}")


class NoteError(ValueError):
    """Text that is not a well-formed signed checkpoint note (the message says why)."""


class NoteSignature(msgspec.Struct, frozen=True):
    """One signature line: the key name, the 4-byte key id and the signature bytes."""

    name: str
    key_id: bytes
    signature: bytes


class CheckpointNote(msgspec.Struct, frozen=True, kw_only=True):
    """A parsed checkpoint note: what it claims (origin, size, hash) and who signed it."""

    origin: str
    size: int
    hash: bytes
    body: bytes
    """The exact signed text (the three lines, each ending in ``\\n``)."""
    signatures: tuple[NoteSignature, ...]
    text: str
    """The whole note as it was read."""

    def signed_by(self, public_key: bytes) -> bool:
        """Whether a signature line by the origin's key name verifies under ``public_key``."""
        kid = key_id(self.origin, public_key)
        for line in self.signatures:
            if line.name == self.origin and line.key_id == kid:
                return verify_signature(public_key, line.signature, self.body)
        return False


def origin_for(public_key: bytes) -> str:
    """The log name a node key signs under: ``reel.journal/`` and 16 hex digits of the key's
    SHA-256. A journal re-signed with another key therefore names another log."""
    return ORIGIN_PREFIX + hashlib.sha256(public_key).hexdigest()[:16]


def key_id(name: str, public_key: bytes) -> bytes:
    """The signed-note key id of an Ed25519 key: ``SHA-256(name || 0x0A || 0x01 || key)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([ED25519]) + public_key).digest()[:4]


def verifier_key(name: str, public_key: bytes) -> str:
    """The signed-note verifier key text ``<name>+<hex key id>+<base64(0x01 || key)>`` (what
    ``note.NewVerifier`` in Go takes)."""
    encoded = base64.b64encode(bytes([ED25519]) + public_key).decode()
    return f"{name}+{key_id(name, public_key).hex()}+{encoded}"


def checkpoint_body(origin: str, size: int, hash_: bytes) -> bytes:
    """The exact bytes a checkpoint signature covers."""
    if not _NAME.fullmatch(origin):
        raise NoteError(f"origin {origin!r} is empty or holds a space or '+'")
    if size < 0:
        raise NoteError(f"size {size} is negative")
    return f"{origin}\n{size}\n{base64.b64encode(hash_).decode()}\n".encode()


def format_note(body: bytes, name: str, public_key: bytes, signature: bytes) -> str:
    """The signed note: the body, an empty line, one signature line."""
    encoded = base64.b64encode(key_id(name, public_key) + signature).decode()
    return f"{body.decode()}\n{SIGNATURE_PREFIX}{name} {encoded}\n"


@lru_cache(maxsize=4096)
def verify_signature(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Ed25519 verification that answers ``False`` for any malformed key or signature.

    Remembered (a pure function of its bytes): a node's start checks each checkpoint's
    signature twice, in the witness's note and in the journal's row, the same three values."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def parse_checkpoint_note(text: str) -> CheckpointNote:
    """Parse one signed checkpoint note (body, empty line, signature lines), strictly.

    Raises :class:`NoteError` naming the problem. Signatures are parsed, not verified."""
    body_text, sep, sigs = text.rpartition("\n\n")
    if not sep:
        raise NoteError("no empty line between the text and its signatures")
    body_text += "\n"
    lines = body_text.split("\n")[:-1]
    if len(lines) < 3 or any(not line for line in lines):
        raise NoteError("the text is not three non-empty lines (origin, size, hash)")
    origin, size_text, hash_text = lines[:3]
    if not _NAME.fullmatch(origin):
        raise NoteError(f"origin {origin!r} is not a key name")
    if not _SIZE.fullmatch(size_text):
        raise NoteError(f"size {size_text!r} is not a decimal number")
    try:
        hash_ = base64.b64decode(hash_text, validate=True)
    except binascii.Error:
        raise NoteError(f"hash {hash_text!r} is not base64") from None
    if len(hash_) != 32:
        raise NoteError(f"hash is {len(hash_)} bytes, not 32")
    if not sigs.endswith("\n"):
        raise NoteError("the last signature line does not end with a newline")
    signatures: list[NoteSignature] = []
    for line in sigs[:-1].split("\n"):
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"not a signature line: {line[:40]!r}")
        name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise NoteError(f"signature of {name!r} is not base64") from None
        if not _NAME.fullmatch(name) or len(raw) < 5:
            raise NoteError(f"malformed signature line for {name!r}")
        signatures.append(NoteSignature(name, raw[:4], raw[4:]))
    return CheckpointNote(
        origin=origin,
        size=int(size_text),
        hash=hash_,
        body=body_text.encode(),
        signatures=tuple(signatures),
        text=text,
    )
