"""What a channel's callers get back: the router's decision on a message (every transport
returns it as is) and a freshly minted pairing code."""

from __future__ import annotations

import msgspec


class RouteResult(msgspec.Struct, frozen=True, kw_only=True):
    """The router's decision on one message, as every transport returns it."""

    channel: str
    message_id: str
    accepted: bool
    reason: str
    """``accepted``, ``duplicate``, or the refusal (``channel_disabled``, ``sender_denied``,
    ``rate_limited``, ``not_allowed``, ``dm_denied``, ``pairing_required``,
    ``pairing_code_invalid``, ``mention_required``, ``broadcast_denied``)."""
    detail: str = ""
    route: str | None = None
    """For an accepted message: ``run``, ``coalesced``, ``command`` or ``pairing``."""
    principal: str = ""
    session_key: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    queued: bool = False
    duplicate: bool = False
    reply: bool = False
    """Whether the answer goes back into the conversation (broadcast policy)."""


class MintedCode(msgspec.Struct, frozen=True, kw_only=True):
    """A new pairing code: shown once, never stored."""

    channel: str
    code: str
    code_id: str
    expires_at_ms: int
