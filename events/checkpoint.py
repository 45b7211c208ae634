"""Signed checkpoints: the node's Ed25519 signature over ``(position, hash)``.

A hash chain alone cannot reveal a truncated tail or a chain rewritten as a whole; a signature
by a key the attacker does not hold can. The signed message is
``b"reel.checkpoint.v1\\x00" || position (8 bytes, big-endian) || hash (32 bytes)``.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.errors import CheckpointKeyError

_DOMAIN = b"reel.checkpoint.v1\x00"
_POSITION = struct.Struct(">Q")


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A signed statement that the journal's row at ``position`` had ``hash``."""

    position: int
    hash: bytes
    signed_at_ms: int
    public_key: bytes
    """Raw 32-byte Ed25519 public key of the signer."""
    signature: bytes


def signed_message(position: int, hash_: bytes) -> bytes:
    """The exact bytes a checkpoint signature covers."""
    return _DOMAIN + _POSITION.pack(position) + hash_


class NodeKey:
    """The node's Ed25519 signing key, kept in a PEM file of mode 0600."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )

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

    def sign(self, position: int, hash_: bytes, signed_at_ms: int) -> Checkpoint:
        """A checkpoint over ``(position, hash_)``."""
        return Checkpoint(
            position=position,
            hash=hash_,
            signed_at_ms=signed_at_ms,
            public_key=self.public_key,
            signature=self._key.sign(signed_message(position, hash_)),
        )


def signature_valid(checkpoint: Checkpoint, trusted_public_key: bytes | None) -> bool:
    """Whether the checkpoint's signature verifies, against ``trusted_public_key`` when given
    (a checkpoint signed by any other key is invalid) or its own embedded key otherwise."""
    key_bytes = trusted_public_key if trusted_public_key is not None else checkpoint.public_key
    if trusted_public_key is not None and checkpoint.public_key != trusted_public_key:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key_bytes).verify(
            checkpoint.signature, signed_message(checkpoint.position, checkpoint.hash)
        )
    except (InvalidSignature, ValueError):
        return False
    return True
