"""Pairing codes: minted by an operator, sent by a sender as ``pair CODE`` in a direct message.

A code is 8 characters of Crockford's base32 (40 random bits, no I, L, O or U to misread),
single use, with a time to live. The journal never holds the code: ``channel.pair_code_minted``
keeps a random salt and scrypt(code, salt). scrypt, not a plain hash, because anyone who may
read the journal (a viewer token can) could otherwise try all 2^40 codes within the code's
lifetime; at scrypt's cost that search takes far longer than the longest TTL (24 h).

A sender's code is compared with every usable code of the channel (few at a time), each
comparison in constant time. A wrong, expired and used code get the same answer.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from transports.channels.router import PAIRING_INVALID_REPLY, ChannelState, PairCode

ALPHABET: Final = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
"""Crockford's base32."""
CODE_LENGTH: Final = 8
SCRYPT_N: Final = 1 << 14
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
KDF: Final = f"scrypt:n={SCRYPT_N},r={SCRYPT_R},p={SCRYPT_P},len=32"
"""What ``channel.pair_code_minted.kdf`` records (a later parameter change stays verifiable)."""

INVALID_REPLY: Final = PAIRING_INVALID_REPLY
"""The one answer to a wrong, expired or used code."""
REQUESTED_REPLY: Final = "Pairing requested. An operator must approve it; you will hear back here."


def new_code() -> str:
    """A fresh code (from the operating system's CSPRNG)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalized(code: str) -> str:
    """What a sender typed, as the code it means: upper case, and the letters Crockford's
    base32 reads as digits (O -> 0, I and L -> 1), so a misread code still matches."""
    return code.strip().upper().replace("O", "0").replace("I", "1").replace("L", "1")


def digest(code: str, salt: bytes, kdf: str = KDF) -> bytes:
    """scrypt(code, salt) with the parameters ``kdf`` names."""
    params = dict(item.split("=") for item in kdf.removeprefix("scrypt:").split(","))
    return hashlib.scrypt(
        normalized(code).encode(),
        salt=salt,
        n=int(params["n"]),
        r=int(params["r"]),
        p=int(params["p"]),
        maxmem=256 * 1024 * 1024,
        dklen=int(params["len"]),
    )


def minted(code: str) -> tuple[bytes, bytes]:
    """``(salt, digest)`` to record for a new ``code``."""
    salt = secrets.token_bytes(16)
    return salt, digest(code, salt)


def match(state: ChannelState, code: str, now_ms: int) -> PairCode | None:
    """The usable code ``code`` is, or None (wrong, expired, used, or malformed alike)."""
    candidate = normalized(code)
    if len(candidate) != CODE_LENGTH or any(c not in ALPHABET for c in candidate):
        return None
    found = None
    for usable in state.usable_codes(now_ms):
        if hmac.compare_digest(digest(candidate, usable.salt, usable.kdf), usable.digest):
            found = usable
    return found
