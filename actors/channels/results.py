"""What a channel's callers get back: the router's decision on a message (every transport
returns it as is) and a freshly minted pairing code. The channel's actor makes each message's
:class:`RouteResult` from the one :func:`received` gives, with the functions below."""

from __future__ import annotations

import msgspec

from actors.channels.router import Refuse
from actors.messages import RunTicket


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


def received(channel: str, message_id: str, principal: str) -> RouteResult:
    """A message's result before anything was decided: what every other result is made from."""
    return RouteResult(
        channel=channel, message_id=message_id, accepted=False, reason="", principal=principal
    )


def refused(base: RouteResult, decision: Refuse) -> RouteResult:
    return msgspec.structs.replace(base, reason=decision.reason, detail=decision.detail)


def duplicate(base: RouteResult, detail: str = "", session_key: str | None = None) -> RouteResult:
    """A repeat: the message id was recorded before, and nothing is done again."""
    return msgspec.structs.replace(
        base, reason="duplicate", detail=detail, session_key=session_key, duplicate=True
    )


def accepted(
    base: RouteResult, route: str, *, reply: bool, session_key: str | None = None, detail: str = ""
) -> RouteResult:
    return msgspec.structs.replace(
        base,
        accepted=True,
        reason="accepted",
        route=route,
        session_key=session_key,
        reply=reply,
        detail=detail,
    )


def started(result: RouteResult, ticket: RunTicket) -> RouteResult:
    """An accepted message's result once the node took its run."""
    return msgspec.structs.replace(
        result, run_id=ticket.run_id, session_id=ticket.session_id, queued=ticket.queued
    )
