"""The shape every surface shows a token in: the API's bodies and the CLI's ``--json``.

Apart from :mod:`transports.access.tokens` (which folds the token events and imports the
journal), so a client command against a running node decodes an answer without loading the
journal's code (issue 23: a client command starts in under 0.3 s).
"""

from __future__ import annotations

from typing import Literal

import msgspec


class TokenInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One token as every surface shows it (``GET /v1/tokens``, ``reel tokens list --json``,
    ``DELETE /v1/tokens/{id}``): never the token itself. One shape, so a script reads the CLI's
    JSON and the API's alike."""

    id: str
    principal: str
    roles: tuple[str, ...]
    created_at_ms: int
    expires_at_ms: int | None
    revoked_at_ms: int | None
    last_used_at_ms: int | None
    """When the token last authenticated a request, to the hour (None: never)."""
    note: str
    state: Literal["active", "expired", "revoked"]


class CreatedToken(TokenInfo, frozen=True, kw_only=True):
    """A token just created (``POST /v1/tokens``, ``reel tokens create --json``): its
    :class:`TokenInfo` and, this once, the token."""

    token: str
