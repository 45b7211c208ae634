"""``[channels.<name>]``: one chat channel's settings, read by its actor (the router's policy:
who may talk, pairing, mentions, flood control, coalescing, acknowledgements) and by its
connector (the connector's own keys: :data:`transports.config.CONNECTOR_KEYS`).

The defaults live here; ``transports/config.py`` embeds the struct as ``[channels.<name>]``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

import msgspec

DmPolicy = Literal["deny", "pairing", "allow"]
"""Direct messages: refused, allowed once the sender is paired (or allow-listed), or allowed."""
GroupPolicy = Literal["pairing", "open", "disabled"]
"""Who starts runs from group conversations: paired (or allow-listed) senders only, anyone
the other rules let through, or nobody."""
Broadcast = Literal["deny", "mention_only", "allow"]
"""Answers in group conversations: never, only to messages that mention the agent, always."""
_DURATION = re.compile(r"([0-9]{1,7})(ms|s|m|h|d)")
_DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """``"10m"`` -> 600000: a duration as ``<number><ms|s|m|h|d>``; ValueError otherwise."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration like 30s, 10m, 8h or 1d")
    return int(match.group(1)) * _DURATION_MS[match.group(2)]


PAIRING_TTL_RANGE_MS = (30_000, 86_400_000)
"""A pairing code lives 30 s to 24 h."""


class ChannelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[channels.<name>]``: one chat channel, its connector and its router policy
    (docs/channels.md). The name is the channel (``channel:<name>:<sender>`` principals,
    ``run.accepted``'s channel, Cedar's ``Channel::"<name>"``)."""

    kind: str
    """The connector: ``webhook`` (built in); others register themselves
    (:data:`transports.channels.CONNECTORS`)."""
    enabled: bool = True
    """A disabled channel refuses every message (``channel_disabled``, recorded)."""
    dm_policy: DmPolicy = "deny"
    group_policy: GroupPolicy | None = None
    """Group conversations (read :attr:`groups`, the effective value): unset, ``pairing`` when
    ``dm_policy`` is ``pairing``, else ``open``."""
    allow_from: tuple[str, ...] = ()
    """Senders (platform ids) allowed to talk to the agent; empty: anyone the other rules let
    through. A sender paired through a pairing code is allowed as if listed."""
    deny_from: tuple[str, ...] = ()
    """Senders always refused (checked first, before pairing or the allow list)."""
    require_mention: bool = True
    """In group conversations, only messages that mention the agent are routed."""
    mention_patterns: tuple[str, ...] = ()
    """Regular expressions (case-insensitive, searched in the text) that count as a mention
    besides the platform's own mention flag, e.g. ``"^reel[,:]"``."""
    broadcast: Broadcast = "deny"
    isolate_session_by_sender: bool = False
    """One session per sender in a group conversation (``...:sender:<id>``) instead of one per
    conversation."""
    coalesce_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0
    """Messages of one sender in one conversation within this window become one run input
    (commands and messages with attachments are never merged); 0: off."""
    pairing_ttl: str = "10m"
    """How long a minted pairing code stays usable (30s to 24h; ``--ttl`` overrides it)."""
    pairing_pending: str = "15m"
    """How long a pairing request waits for an operator before it is denied."""
    pairing_grant: str = "8h"
    """How long an approved sender stays paired."""
    rate_limit_per_minute: Annotated[int, msgspec.Meta(ge=1)] = 20
    """Messages one sender may send per minute (a burst of ``rate_burst`` at once)."""
    rate_burst: Annotated[int, msgspec.Meta(ge=1)] = 5
    max_message_bytes: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = 32 * 1024
    """Longer messages are refused as bad input (HTTP 400 ``$.text``), never cut."""
    reply_max_chars: Annotated[int, msgspec.Meta(ge=16)] = 4000
    """The platform's limit per message: longer answers go out in parts."""
    ack: Literal["none", "react", "message"] = "none"
    """While a run is in progress: nothing, a reaction on the message (``ack_reaction``), or a
    short message (``ack_text``)."""
    ack_text: str = "working on it..."
    ack_reaction: str = "\N{EYES}"
    approval_prompts: bool = True
    """Tell the conversation when a run waits for an approval (and how to answer it)."""
    secret_env: str = ""
    """webhook: the environment variable holding the HMAC-SHA256 secret (never the secret)."""
    outbound_url: str = ""
    """webhook: where replies are POSTed (signed with the same secret)."""
    outbound_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    homeserver: str = ""
    """matrix: the homeserver's base URL (``https://matrix.example.org``)."""
    user_id: str = ""
    """matrix: the bot's user id (``@reel:example.org``)."""
    password_env: str = ""
    """matrix: the environment variable holding the bot's password (never the password)."""
    access_token_env: str = ""
    """matrix: the environment variable holding an access token (instead of a password)."""
    allow_rooms: tuple[str, ...] = ()
    """matrix: the invites the bot accepts: room ids (``!id:server``), inviters' user ids
    (``@user:server``) or ``*``; any other invite is rejected."""

    @property
    def groups(self) -> GroupPolicy:
        """The effective ``group_policy``: as set, else ``pairing`` when direct messages need
        pairing (a sender who must pair to talk in private must not talk freely in a room),
        else ``open`` (``broadcast`` and ``require_mention`` still decide)."""
        if self.group_policy is not None:
            return self.group_policy
        return "pairing" if self.dm_policy == "pairing" else "open"

    @property
    def pairing(self) -> bool:
        """Pairing is on: ``pair CODE`` in a direct message is a pairing request."""
        return self.dm_policy == "pairing" or self.groups == "pairing"

    def __post_init__(self) -> None:
        for name in ("pairing_ttl", "pairing_pending", "pairing_grant"):
            try:
                duration_ms(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        low, high = PAIRING_TTL_RANGE_MS
        if not low <= duration_ms(self.pairing_ttl) <= high:
            raise ValueError("pairing_ttl must be between 30s and 24h")
        for pattern in self.mention_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"mention_patterns: {pattern!r} is not a regex: {exc}") from None
