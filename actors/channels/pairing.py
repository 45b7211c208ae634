"""Pairing: codes minted by an operator, sent by a sender as ``pair CODE`` in a direct message,
and the events each step of a pairing appends.

A code is 8 characters of Crockford's base32 (40 random bits, no I, L, O or U to misread),
single use, with a time to live. The journal never holds the code: ``channel.pair_code_minted``
keeps a random salt and scrypt(code, salt). scrypt, not a plain hash, because anyone who may
read the journal (a viewer token can) could otherwise try all 2^40 codes within the code's
lifetime; at scrypt's cost that search takes far longer than the longest TTL (24 h).

A sender's code is compared with every usable code of the channel (few at a time), each
comparison in constant time. A wrong, expired and used code get the same answer.

A code that matches makes a pairing request, an approval like a tool's: the events here are
pure functions of the channel's folded state and plain inputs (ids, clock readings), and the
channel's actor (:mod:`actors.channels.actor`) performs the effects: it appends them,
registers a waiting request with the node's approval registry (so every approval surface
decides it), denies it when it expires, and tells the sender.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Final

from actors.channels.message import InboundMessage
from actors.channels.router import (
    PAIRING_INVALID_REPLY,
    ChannelState,
    PairCode,
    PendingPairing,
    Refuse,
)
from actors.errors import ApprovalAlreadyResolved, InvalidCommand, UnknownApproval
from actors.messages import ResolveApproval
from events.catalog import ChannelPairCodeMinted, ChannelPairingRequested, ChannelPairingResolved

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
INVALID_CODE: Final = Refuse(
    reason="pairing_code_invalid",
    detail="the code is wrong, expired or used",
    reply=INVALID_REPLY,
)
"""The refusal of a ``pair CODE`` that :func:`match` finds no usable code for."""


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


# --- the events of a pairing's steps -------------------------------------------------------------


def code_minted(
    channel: str, code_id: str, salted: tuple[bytes, bytes], expires_at_ms: int
) -> ChannelPairCodeMinted:
    """``channel.pair_code_minted``: a new code's ``(salt, digest)`` (:func:`minted`), never
    the code."""
    salt, digest_ = salted
    return ChannelPairCodeMinted(
        channel=channel,
        code_id=code_id,
        salt=salt,
        digest=digest_,
        kdf=KDF,
        expires_at_ms=expires_at_ms,
    )


def requested(
    channel: str,
    code: PairCode,
    message: InboundMessage,
    principal: str,
    *,
    approval_id: str,
    expires_at_ms: int,
) -> ChannelPairingRequested:
    """``channel.pairing_requested``: ``message``'s sender sent the usable ``code`` (found by
    :func:`match`) and waits for an operator until ``expires_at_ms``."""
    return ChannelPairingRequested(
        channel=channel,
        approval_id=approval_id,
        code_id=code.code_id,
        principal=principal,
        conversation=message.conversation,
        display_name=message.sender_name,
        expires_at_ms=expires_at_ms,
    )


def undecidable(state: ChannelState, command: ResolveApproval) -> Exception | None:
    """Why ``command`` cannot decide a pairing request (None: it can): no request waits under
    its id (already decided, ``state.resolved``, is a conflict, not unknown), or it asks for
    more than one decision (a pairing approval is decided once)."""
    if command.approval_id not in state.pending:
        if command.approval_id in state.resolved:
            return ApprovalAlreadyResolved(f"approval {command.approval_id} is already resolved")
        return UnknownApproval(f"no approval with id {command.approval_id!r}")
    if command.scope != "once" or command.match != "any" or command.prefix:
        return InvalidCommand("scope", "a pairing approval is decided once (scope once)")
    return None


def resolution(
    channel: str,
    pending: PendingPairing,
    decision: str,
    decided_by: str,
    reason: str,
    *,
    now_ms: int,
    grant_ms: int,
) -> ChannelPairingResolved:
    """``channel.pairing_resolved``: an ``allow`` pairs the sender for ``grant_ms`` from
    ``now_ms`` (``allowed_until_ms``), a deny pairs nothing (``grant_ms`` is not read)."""
    return ChannelPairingResolved(
        channel=channel,
        approval_id=pending.approval_id,
        principal=pending.principal,
        decision=decision,  # type: ignore[arg-type]
        decided_by=decided_by,
        reason=reason,
        allowed_until_ms=now_ms + grant_ms if decision == "allow" else 0,
        waited_ms=max(0, now_ms - pending.requested_at_ms),
    )
