"""The channel router: a pure decision per inbound message, and the pure fold of a channel's
own stream that the decision reads (an :class:`actors.aggregate.Aggregate`: every record of
``channel/<name>`` starts or continues it).

:func:`route` takes the channel's policy (its ``[channels.<name>]`` config), the folded
:class:`ChannelState`, the sender's rate bucket and the message, and returns what to do. It
checks, in this order (``ROUTER_ORDER``; docs/channels.md explains each):

1. ``enabled``: a disabled channel refuses everything (``channel_disabled``);
2. ``deny_from``: a listed sender is refused (``sender_denied``);
3. flood control: one token bucket per sender (``rate_limited``);
4. pairing: ``pair CODE`` in a direct message, when ``dm_policy`` or ``group_policy`` is
   ``pairing``, is a pairing request (the code is checked by the caller:
   :func:`actors.channels.pairing.match`);
5. ``allow_from``: when the list is not empty, a sender neither listed nor paired is refused
   (``not_allowed``, or ``pairing_required`` in a direct message when pairing is on);
6. ``dm_policy`` for direct messages: ``deny`` refuses (``dm_denied``), ``pairing`` needs a
   paired or listed sender (``pairing_required``), ``allow`` lets it through;
   ``group_policy`` for group conversations (:attr:`ChannelConfig.groups`): ``disabled``
   refuses (``group_denied``), ``pairing`` needs a paired or listed sender
   (``pairing_required``, silent as every refusal in a group), ``open`` lets it through;
7. mention, in group conversations: with ``require_mention``, a message that does not mention
   the agent (the platform's flag or one of ``mention_patterns``) is ignored
   (``mention_required``);
8. ``broadcast``, in group conversations: ``deny`` refuses (``broadcast_denied``: the agent
   never answers in a group), ``mention_only`` answers only messages that mention it,
   ``allow`` answers every routed message;
9. ``!reel ...`` is a command; anything else is accepted for the session derived from
   ``channel:conversation`` (plus ``:sender:<id>`` with ``isolate_session_by_sender``).

Nothing here performs I/O or reads a clock: the caller passes ``now_ms`` and records the
decision as an event.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Final, NamedTuple

import msgspec

from actors.channels.config import ChannelConfig
from actors.channels.message import InboundMessage
from actors.channels.records import stream_of
from actors.stream import Recorded
from events.catalog import (
    ChannelCursorSaved,
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    ChannelRefusal,
)
from events.fields import SESSION_KEY
from events.redaction.redact import looks_secret

ROUTER_ORDER: Final = (
    "enabled",
    "deny_from",
    "rate_limit",
    "pairing",
    "allow_from",
    "dm_policy",
    "group_policy",
    "mention",
    "broadcast",
    "command_or_accept",
)
"""The order of the checks (module docstring)."""

PAIR_COMMAND = re.compile(r"\s*pair\s+(\S{1,64})\s*", re.IGNORECASE)
"""``pair CODE`` (the whole message)."""
COMMAND_PREFIX = re.compile(r"\s*!reel(?:\s+|$)", re.IGNORECASE)
"""A ``!reel ...`` channel command."""
ANY_SENDER = "*"
"""In ``allow_from`` / ``deny_from``: every sender."""

PAIRING_REQUIRED_REPLY = (
    "You are not paired with this agent. Ask its operator for a pairing code and send "
    "`pair CODE` here."
)
PAIRING_INVALID_REPLY = "That pairing code is not valid. Ask the operator for a new one."
"""The one answer for a wrong, expired or used code: which it was is not revealed."""
RATE_LIMITED_REPLY = "You are sending messages too fast; wait a moment."


# --- state: a fold of the channel's own stream ------------------------------------------------


class PairCode(msgspec.Struct, frozen=True, kw_only=True):
    """A minted pairing code, as the journal holds it (its digest, never the code)."""

    code_id: str
    salt: bytes
    digest: bytes
    kdf: str
    expires_at_ms: int
    used: bool = False


class PendingPairing(msgspec.Struct, frozen=True, kw_only=True):
    """A pairing request waiting for an operator."""

    approval_id: str
    principal: str
    conversation: str
    requested_at_ms: int
    expires_at_ms: int


class ChannelState(msgspec.Struct, frozen=True, kw_only=True):
    """What the channel needs to remember, folded from ``channel/<name>``: pairing codes,
    pending pairing requests, senders paired until when, the pairing requests decided, and
    where its connector resumes."""

    channel: str = ""
    codes: Mapping[str, PairCode] = msgspec.field(default_factory=dict)
    pending: Mapping[str, PendingPairing] = msgspec.field(default_factory=dict)
    paired: Mapping[str, int] = msgspec.field(default_factory=dict)
    """Sender principal -> paired until (ms since the epoch)."""
    resolved: frozenset[str] = frozenset()
    """Pairing approvals already decided (a second decision is a conflict, not unknown)."""
    cursor: str | None = None
    """The connector's last saved position (``channel.cursor_saved``): where it resumes."""

    def is_paired(self, principal: str, now_ms: int) -> bool:
        return self.paired.get(principal, 0) > now_ms

    def usable_codes(self, now_ms: int) -> list[PairCode]:
        return [c for c in self.codes.values() if not c.used and c.expires_at_ms > now_ms]


def initial(first: Recorded) -> ChannelState | None:
    """The channel whose stream ``first`` is on, after it (None for a record of no channel)."""
    if not first.stream.startswith(stream_of("")):
        return None
    return apply(ChannelState(channel=first.stream.removeprefix(stream_of(""))), first)


def apply(state: ChannelState, rec: Recorded) -> ChannelState:
    """``state`` after ``rec`` (records of other kinds or streams change nothing). A new mapping
    is made for what changes: the state itself is never mutated."""
    if rec.stream != stream_of(state.channel):
        return state
    event, recorded_at_ms = rec.event, rec.at_ms
    if isinstance(event, ChannelPairCodeMinted):
        code = PairCode(
            code_id=event.code_id,
            salt=event.salt,
            digest=event.digest,
            kdf=event.kdf,
            expires_at_ms=event.expires_at_ms,
        )
        live = {k: c for k, c in state.codes.items() if c.expires_at_ms > recorded_at_ms}
        return msgspec.structs.replace(state, codes={**live, event.code_id: code})
    if isinstance(event, ChannelPairingRequested):
        codes = dict(state.codes)
        if event.code_id in codes:
            codes[event.code_id] = msgspec.structs.replace(codes[event.code_id], used=True)
        request = PendingPairing(
            approval_id=event.approval_id,
            principal=event.principal,
            conversation=event.conversation,
            requested_at_ms=recorded_at_ms,
            expires_at_ms=event.expires_at_ms,
        )
        return msgspec.structs.replace(
            state, codes=codes, pending={**state.pending, event.approval_id: request}
        )
    if isinstance(event, ChannelPairingResolved):
        pending = {k: p for k, p in state.pending.items() if k != event.approval_id}
        paired = dict(state.paired)
        if event.decision == "allow":
            paired[event.principal] = max(paired.get(event.principal, 0), event.allowed_until_ms)
        resolved = state.resolved | {event.approval_id}
        return msgspec.structs.replace(state, pending=pending, paired=paired, resolved=resolved)
    if isinstance(event, ChannelCursorSaved):
        return msgspec.structs.replace(state, cursor=event.cursor)
    return state


# --- flood control ------------------------------------------------------------------------------


class Bucket(NamedTuple):
    """A sender's token bucket: tokens left at ``at_ms``."""

    tokens: float
    at_ms: int


def take(bucket: Bucket | None, per_minute: int, burst: int, now_ms: int) -> tuple[bool, Bucket]:
    """Whether one more message fits, and the bucket after it: ``burst`` tokens at most,
    refilled at ``per_minute`` per minute."""
    if bucket is None:
        bucket = Bucket(float(burst), now_ms)
    elapsed = max(0, now_ms - bucket.at_ms)
    tokens = min(float(burst), bucket.tokens + elapsed * per_minute / 60_000)
    if tokens >= 1.0:
        return True, Bucket(tokens - 1.0, now_ms)
    return False, Bucket(tokens, now_ms)


# --- sessions -----------------------------------------------------------------------------------

_KEY_SAFE = re.compile(r"[A-Za-z0-9._:@/+-]")
HASHED_MARK = "=="
"""Starts a hashed key part: escaping never writes two ``=`` in a row."""


def _escaped(text: str) -> str:
    """``text`` with every character a session key may not hold (and ``=``) as ``=XX`` per
    UTF-8 byte: reversible, so two conversations never share a key."""
    out: list[str] = []
    for char in text:
        if _KEY_SAFE.fullmatch(char):
            out.append(char)
        else:
            out.extend(f"={byte:02X}" for byte in char.encode("utf-8", "surrogatepass"))
    return "".join(out)


def session_key(channel: str, conversation: str, sender: str | None = None) -> str:
    """The session a conversation (and, isolated, a sender in it) talks to:
    ``<channel>:<conversation>[:sender:<sender>]``, escaped to fit a session key; a key too
    long for one, or that would look like a secret, is ``<channel>:==<sha256 hex>`` of it."""
    natural = f"{channel}:{_escaped(conversation)}"
    if sender is not None:
        natural += f":sender:{_escaped(sender)}"
    if SESSION_KEY.pattern.fullmatch(natural) and not looks_secret(natural):
        return natural
    digest = hashlib.sha256(natural.encode()).hexdigest()[:40]
    return f"{channel}:{HASHED_MARK}{digest}"


# --- decisions ----------------------------------------------------------------------------------


class Refuse(msgspec.Struct, frozen=True, kw_only=True):
    """Refused for ``reason``; ``reply`` is what the sender is told (None: nothing)."""

    reason: ChannelRefusal
    detail: str
    reply: str | None = None


class Pair(msgspec.Struct, frozen=True, kw_only=True):
    """A pairing request with ``code`` (to be checked against the channel's codes)."""

    code: str


class Command(msgspec.Struct, frozen=True, kw_only=True):
    """A ``!reel`` command, answered in the conversation when ``reply``."""

    text: str
    session_key: str
    reply: bool


class Accept(msgspec.Struct, frozen=True, kw_only=True):
    """Start or continue a run in ``session_key``; ``reply``: answer in the conversation."""

    session_key: str
    reply: bool
    mentioned: bool
    coalesce: bool


Decision = Refuse | Pair | Command | Accept


class Routed(NamedTuple):
    """The decision, and the sender's bucket after it (None: flood control not reached)."""

    decision: Decision
    bucket: Bucket | None


def _listed(sender: str, names: tuple[str, ...]) -> bool:
    return ANY_SENDER in names or sender in names


def mentioned(config: ChannelConfig, message: InboundMessage) -> bool:
    """The platform says the message mentions the agent, or a mention pattern matches."""
    if message.mentions_agent:
        return True
    return any(re.search(p, message.text, re.IGNORECASE) for p in config.mention_patterns)


def _conversation_policy(config: ChannelConfig, direct: bool, allowed: bool) -> Refuse | None:
    """Rule 6: ``dm_policy`` in a direct conversation, ``group_policy`` in a group one; the
    refusal, or None to go on. ``allowed``: the sender is listed in ``allow_from`` or paired."""
    if direct:
        if config.dm_policy == "deny":
            return Refuse(reason="dm_denied", detail="dm_policy is deny")
        if config.dm_policy == "pairing" and not allowed:
            return Refuse(
                reason="pairing_required",
                detail="dm_policy is pairing and the sender is not paired",
                reply=PAIRING_REQUIRED_REPLY,
            )
        return None
    if config.groups == "disabled":
        return Refuse(reason="group_denied", detail="group_policy is disabled")
    if config.groups == "pairing" and not allowed:
        # no reply: a room is not told who may talk (every group refusal is silent)
        return Refuse(
            reason="pairing_required",
            detail="group_policy is pairing and the sender is not paired",
        )
    return None


def route(
    config: ChannelConfig,
    state: ChannelState,
    message: InboundMessage,
    principal: str,
    bucket: Bucket | None,
    now_ms: int,
) -> Routed:
    """Decide what ``message`` (from ``principal``) becomes, in the documented order."""
    sender = message.sender
    if not config.enabled:
        return Routed(Refuse(reason="channel_disabled", detail="the channel is disabled"), None)
    if _listed(sender, config.deny_from):
        return Routed(Refuse(reason="sender_denied", detail="the sender is in deny_from"), None)
    fits, bucket = take(bucket, config.rate_limit_per_minute, config.rate_burst, now_ms)
    if not fits:
        detail = f"over {config.rate_limit_per_minute} messages a minute"
        return Routed(
            Refuse(reason="rate_limited", detail=detail, reply=RATE_LIMITED_REPLY), bucket
        )
    direct = message.is_direct
    if direct and config.pairing:
        pair = PAIR_COMMAND.fullmatch(message.text)
        if pair is not None and not message.attachments:
            return Routed(Pair(code=pair.group(1)), bucket)
    allowed = _listed(sender, config.allow_from) or state.is_paired(principal, now_ms)
    if config.allow_from and not allowed:
        if direct and config.pairing:
            refusal = Refuse(
                reason="pairing_required",
                detail="the sender is neither in allow_from nor paired",
                reply=PAIRING_REQUIRED_REPLY,
            )
            return Routed(refusal, bucket)
        return Routed(
            Refuse(reason="not_allowed", detail="the sender is not in allow_from"), bucket
        )
    where = _conversation_policy(config, direct, allowed)
    if where is not None:
        return Routed(where, bucket)
    is_mentioned = mentioned(config, message)
    reply = True
    if not direct:
        if config.require_mention and not is_mentioned:
            detail = "group messages must mention the agent"
            return Routed(Refuse(reason="mention_required", detail=detail), bucket)
        if config.broadcast == "deny":
            detail = "broadcast is deny: the agent does not answer in group conversations"
            return Routed(Refuse(reason="broadcast_denied", detail=detail), bucket)
        reply = config.broadcast == "allow" or is_mentioned
    key = session_key(
        message.channel,
        message.conversation,
        sender if config.isolate_session_by_sender else None,
    )
    if COMMAND_PREFIX.match(message.text):
        return Routed(Command(text=message.text, session_key=key, reply=reply), bucket)
    coalesce = config.coalesce_ms > 0 and not message.attachments
    decision = Accept(session_key=key, reply=reply, mentioned=is_mentioned, coalesce=coalesce)
    return Routed(decision, bucket)
