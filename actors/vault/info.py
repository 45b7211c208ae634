"""What every surface shows of a secret (kept apart from the store, so a client command that
prints it loads no journal, fold or redaction machinery)."""

from __future__ import annotations

import msgspec


class SecretInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One secret as every surface shows it (``GET /v1/vault``, ``reel vault list --json``):
    never its value."""

    name: str
    revision: int
    created_at_ms: int
    updated_at_ms: int
    updated_by: str
    readable: bool
    """False when its value cannot be decrypted (a key file that is not the one it was written
    with, a damaged file): a handle naming it then fails as one naming no secret."""
