"""Signed checkpoints: the node's Ed25519 signature over the chain's head, kept in the chain.

A hash chain alone cannot reveal a truncated tail or a chain rewritten as a whole; a signature
by a key the attacker does not hold can, and a copy of each signature kept outside the data dir
(the witness) can even against someone who holds the key. The signed text is a C2SP checkpoint
note (:mod:`events.note`): ``origin\\nsize\\nbase64(hash)\\n``. The journal writer stores each
signature as a ``journal.checkpoint`` row right after the row it covers, so deleting a
checkpoint breaks the chain like deleting any other row.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from pathlib import Path

import msgspec
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.catalog import JournalCheckpoint, JournalSuperCheckpoint, kind_of
from events.errors import CheckpointKeyError
from events.note import checkpoint_body, format_note, key_id, origin_for, verify_signature

CHECKPOINT_STREAM = "journal"
"""The stream of checkpoint rows; only the journal writer appends to it."""
CHECKPOINT_KIND = kind_of(JournalCheckpoint)


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A signed statement that the journal's row at ``position`` had ``hash``.

    Read from a ``journal.checkpoint`` row at ``row_position`` (``position + 1``)."""

    position: int
    """The last position covered (the note's ``size``)."""
    hash: bytes
    """The hash of the row at ``position``."""
    signed_at_ms: int
    """The checkpoint row's ``recorded_at_ms`` (not signed)."""
    public_key: bytes
    """Raw 32-byte Ed25519 public key of the signer."""
    signature: bytes
    """Ed25519 over :meth:`body`."""
    origin: str = ""
    """The log name the note is signed under (:func:`events.note.origin_for`)."""
    row_position: int = 0
    """Where the checkpoint row stands in the chain."""
    previous: int = 0
    """The row position of the checkpoint before this one (0 for the first)."""

    def body(self) -> bytes:
        """The exact signed bytes (the note text)."""
        return checkpoint_body(self.origin, self.position, self.hash)

    def note(self) -> str:
        """The C2SP signed note a witness stores."""
        return format_note(self.body(), self.origin, self.public_key, self.signature)

    def event(self) -> JournalCheckpoint:
        """The event the journal stores for this checkpoint."""
        return JournalCheckpoint(
            origin=self.origin,
            size=self.position,
            hash=self.hash,
            previous=self.previous,
            public_key=self.public_key,
            signature=self.signature,
        )

    @classmethod
    def of(
        cls,
        event: JournalCheckpoint | JournalSuperCheckpoint,
        row_position: int,
        recorded_at_ms: int,
    ) -> Checkpoint:
        """The checkpoint a stored ``journal.checkpoint`` row states, or a PostgreSQL
        ``journal.super_checkpoint`` row (over every shard's head; it names no previous)."""
        return cls(
            position=event.size,
            hash=event.hash,
            signed_at_ms=recorded_at_ms,
            public_key=event.public_key,
            signature=event.signature,
            origin=event.origin,
            row_position=row_position,
            previous=event.previous if isinstance(event, JournalCheckpoint) else 0,
        )


class NodeKey:
    """The node's Ed25519 signing key, kept in a PEM file of mode 0600."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.origin: str = origin_for(self.public_key)
        """The log name this key signs checkpoints under."""

    @classmethod
    def load_or_create(cls, path: Path) -> NodeKey:
        """Load the key at ``path``, creating it (mode 0600, atomically) on first use."""
        if not path.exists():
            key = Ed25519PrivateKey.generate()
            pem = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            tmp = path.with_name(path.name + f".tmp{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, pem)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)  # never replaces a key another process created meanwhile
            except FileExistsError:
                pass
            finally:
                tmp.unlink()
        return cls.load(path)

    @classmethod
    def load(cls, path: Path) -> NodeKey:
        """Load an existing key; refuses a key file readable by group or others."""
        try:
            mode = path.stat().st_mode
            if mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise CheckpointKeyError(
                    f"node key {path} has mode {stat.S_IMODE(mode):o}; it must be 600"
                )
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except OSError as exc:
            raise CheckpointKeyError(f"cannot read node key {path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise CheckpointKeyError(f"node key {path} is not a PEM private key") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise CheckpointKeyError(f"node key {path} is not an Ed25519 key")
        return cls(key)

    def public_pem(self) -> str:
        """The public key as a SubjectPublicKeyInfo PEM block (what an auditor pins)."""
        return public_pem(self.public_key)

    def sign_bytes(self, data: bytes) -> bytes:
        """An Ed25519 signature over ``data`` (a forwarded command: :mod:`transports.cluster`)."""
        return self._key.sign(data)

    def sign(
        self, position: int, hash_: bytes, signed_at_ms: int, *, previous: int = 0
    ) -> Checkpoint:
        """A checkpoint over ``(position, hash_)``, to be stored at ``position + 1``."""
        return Checkpoint(
            position=position,
            hash=hash_,
            signed_at_ms=signed_at_ms,
            public_key=self.public_key,
            signature=self._key.sign(checkpoint_body(self.origin, position, hash_)),
            origin=self.origin,
            row_position=position + 1,
            previous=previous,
        )


def public_pem(public_key: bytes) -> str:
    """A raw Ed25519 public key as a SubjectPublicKeyInfo PEM block."""
    return (
        Ed25519PublicKey.from_public_bytes(public_key)
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def load_public_key(path: Path) -> bytes:
    """The raw Ed25519 public key in ``path``: a PEM ``PUBLIC KEY`` block (``reel journal
    pubkey``) or a signed-note verifier key ``name+id+base64``. Raises
    :class:`CheckpointKeyError` with one line; never reads a private key."""
    return _public_key(_read_public(path), str(path))


def load_roster(path: Path) -> frozenset[bytes]:
    """The raw Ed25519 public keys in the roster file ``path``: what ``reel journal pubkey``
    prints for each node (PEM blocks, or ``--vkey`` lines, one per line), concatenated; lines
    starting with ``#`` are comments. Raises :class:`CheckpointKeyError` with one line naming
    the entry that is not a public key, or when it holds none."""
    data = _read_public(path)
    text = data.decode("ascii", "replace")
    keys: set[bytes] = set()
    for number, block in enumerate(_PEM.findall(text), 1):
        keys.add(_public_key(block.encode(), f"{path} (PEM block {number})"))
    for number, line in enumerate(_PEM.sub("", text).splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            keys.add(_public_key(line.encode(), f"{path} (line {number})"))
    if not keys:
        raise CheckpointKeyError(f"roster {path} holds no public key")
    return frozenset(keys)


_PEM = re.compile(r"-----BEGIN PUBLIC KEY-----.*?-----END PUBLIC KEY-----\n?", re.DOTALL)


def _read_public(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointKeyError(f"cannot read public key {path}: {exc.strerror}") from None
    if b"PRIVATE KEY" in data:
        raise CheckpointKeyError(
            f"{path} holds a private key; pin the public key (reel journal pubkey)"
        )
    return data


def _public_key(data: bytes, path: str) -> bytes:
    """One public key (a PEM block or a verifier key line) named ``path`` in messages."""
    text = data.decode("ascii", "replace").strip()
    if text.count("+") >= 2 and "\n" not in text:
        name, kid, encoded = text.split("+", 2)  # names hold no '+'; base64 may
        try:
            raw = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raw = b""
        if len(raw) == 33 and raw[0] == 0x01 and key_id(name, raw[1:]).hex() == kid:
            return raw[1:]
        raise CheckpointKeyError(f"{path} is not an Ed25519 signed-note verifier key")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError:
        raise CheckpointKeyError(f"{path} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointKeyError(f"{path} is not an Ed25519 public key")
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def signature_valid(checkpoint: Checkpoint, trusted_public_key: bytes | None) -> bool:
    """Whether the checkpoint's signature verifies, against ``trusted_public_key`` when given
    (a checkpoint signed by any other key, or under another key's origin, is invalid) or its
    own embedded key otherwise."""
    key = trusted_public_key if trusted_public_key is not None else checkpoint.public_key
    if checkpoint.public_key != key or checkpoint.origin != origin_for(key):
        return False
    try:
        body = checkpoint.body()
    except ValueError:
        return False
    return verify_signature(key, checkpoint.signature, body)
