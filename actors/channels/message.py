"""What every connector produces and consumes: one :class:`InboundMessage` per platform
message, one :class:`OutboundMessage` per reply, and the checks an inbound message passes
before the router sees it.

A connector's job is translation only: a Matrix event, a webhook body or a Slack payload
becomes an ``InboundMessage`` with the same fields whatever the platform, so the router, the
pairing rules and the journal never learn a platform's shapes.
"""

from __future__ import annotations

import msgspec

from events.fields import PLATFORM_ID, PRINCIPAL
from events.redaction.redact import looks_secret
from policies import CHANNEL_PRINCIPAL_PREFIX

ID_MAX_CHARS = 255
"""The longest conversation, thread or message id a connector may hand in."""
NAME_MAX_CHARS = 128
"""The longest sender display name kept."""
ATTACHMENTS_MAX = 16


class InvalidMessage(ValueError):
    """An inbound message a connector (or an API client) got wrong: ``field`` names it, the
    message never quotes the value. Transports answer 400 / INVALID_ARGUMENT."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class Attachment(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A file that came with a message. The run gets a line naming it, never its bytes."""

    name: str = ""
    content_type: str = ""
    url: str = ""
    size: int = 0


class InboundMessage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One platform message, normalized.

    ``sender`` is the platform's stable user id (``@alice:example.org``, ``U024BE7LH``): it
    names the run's principal ``channel:<channel>:<sender>`` and is matched against
    ``allow_from`` / ``deny_from``. ``sender_name`` is the display name (free text, redacted
    when stored). ``message_id`` is the platform's id of this message: the same id delivered
    twice starts at most one run."""

    channel: str
    conversation: str
    sender: str
    text: str
    message_id: str
    thread: str | None = None
    sender_name: str = ""
    is_direct: bool = False
    mentions_agent: bool = False
    attachments: tuple[Attachment, ...] = ()


class MessageBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An inbound message as JSON (the webhook's body, ``POST /v1/channels/{channel}/messages``):
    :class:`InboundMessage` without ``channel``, which the URL names."""

    message_id: str
    conversation: str
    sender: str
    text: str = ""
    is_direct: bool = False
    thread: str | None = None
    mentions_agent: bool = False
    sender_name: str = ""
    attachments: tuple[Attachment, ...] = ()

    def message(self, channel: str) -> InboundMessage:
        return InboundMessage(
            channel=channel,
            conversation=self.conversation,
            sender=self.sender,
            text=self.text,
            message_id=self.message_id,
            thread=self.thread,
            sender_name=self.sender_name,
            is_direct=self.is_direct,
            mentions_agent=self.mentions_agent,
            attachments=self.attachments,
        )


class OutboundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A reply going out through a connector: one part of an answer, a notice or a prompt."""

    channel: str
    conversation: str
    text: str
    thread: str | None = None
    in_reply_to: str = ""
    """The platform's id of the message answered (empty for notices that answer none)."""
    run_id: str = ""
    part: int = 1
    parts: int = 1


def principal_of(channel: str, sender: str) -> str:
    """The principal a sender acts as: ``channel:<channel>:<sender>``."""
    return f"{CHANNEL_PRINCIPAL_PREFIX}{channel}:{sender}"


def sender_of(principal: str) -> str:
    """The sender :func:`principal_of` made ``principal`` for (channel names hold no ``:``)."""
    return principal.split(":", 2)[2]


def check_inbound(message: InboundMessage, max_text_bytes: int) -> str:
    """Refuse what no router decision should ever see (:class:`InvalidMessage` naming the
    field); return the sender's principal."""
    for field in ("conversation", "message_id", "thread"):
        value: str | None = getattr(message, field)
        if value is None and field == "thread":
            continue
        if value is None or not value.strip():
            raise InvalidMessage(field, "must not be empty")
        if len(value) > ID_MAX_CHARS:
            raise InvalidMessage(field, f"is {len(value)} characters; the limit is {ID_MAX_CHARS}")
        if PLATFORM_ID.problem(value, looks_secret) is not None:
            raise InvalidMessage(field, "must be printable ASCII without spaces (a platform id)")
    if len(message.sender_name) > NAME_MAX_CHARS:
        raise InvalidMessage("sender_name", f"is longer than {NAME_MAX_CHARS} characters")
    if len(message.attachments) > ATTACHMENTS_MAX:
        raise InvalidMessage("attachments", f"at most {ATTACHMENTS_MAX} per message")
    size = len(message.text.encode("utf-8", "surrogatepass"))
    if size > max_text_bytes:
        raise InvalidMessage("text", f"the message is {size} bytes; the limit is {max_text_bytes}")
    if not message.text.strip() and not message.attachments:
        raise InvalidMessage("text", "the message is empty")
    if not message.sender:
        raise InvalidMessage("sender", "must not be empty")
    principal = principal_of(message.channel, message.sender)
    problem = PRINCIPAL.problem(principal, looks_secret)
    if problem is not None:
        raise InvalidMessage(
            "sender",
            "the sender id does not fit a principal (channel:<channel>:<sender> must match "
            f"{PRINCIPAL.pattern.pattern} and not look like a secret)",
        )
    return principal


def run_input(messages: list[InboundMessage]) -> str:
    """The text a run gets for one or more (coalesced) messages, attachments named on their
    own lines."""
    parts: list[str] = []
    for message in messages:
        text = message.text.strip()
        if text:
            parts.append(text)
        for attachment in message.attachments:
            what = attachment.name or attachment.url or "a file"
            kind = f", {attachment.content_type}" if attachment.content_type else ""
            parts.append(f"[attachment: {what}{kind}]")
    return "\n".join(parts)


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in parts of at most ``limit`` characters, cut at a paragraph, a line or a
    space when one is in the second half of a part, else mid-word. Only the whitespace at a
    cut is dropped."""
    if limit < 1:
        raise ValueError("limit must be positive")
    parts: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = -1
        for mark in ("\n\n", "\n", " "):
            at = window.rfind(mark)
            if at >= limit // 2:
                cut = at
                break
        if cut <= 0:
            parts.append(window)
            rest = rest[limit:]
        else:
            parts.append(rest[:cut].rstrip())
            rest = rest[cut:].lstrip()
    if rest or not parts:
        parts.append(rest)
    return parts
