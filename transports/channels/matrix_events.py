"""What Matrix events mean to reel, and what reel's replies are as Matrix events.

Pure functions over the events' JSON (as the homeserver sent it): no I/O and no matrix-nio, so
each rule is tested on its own (tests/transports/channels_matrix/test_matrix_events.py) and the
connector (:mod:`transports.channels.matrix`) only moves events in and out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote

from actors.channels.message import (
    ID_MAX_CHARS,
    NAME_MAX_CHARS,
    Attachment,
    InboundMessage,
    OutboundMessage,
)

ANY_INVITER: Final = "*"
"""In ``allow_rooms``: accept every invite."""
USER_ID: Final = re.compile(r"@[^:\s]+:[^\s]+")
ROOM_ID: Final = re.compile(r"![^:\s]+:[^\s]+")
_ATTACHMENT_TYPES: Final = frozenset({"m.image", "m.file", "m.audio", "m.video"})
_TEXT_TYPES: Final = frozenset({"m.text", "m.emote"})
"""Message types read as text (``m.notice`` is left out on purpose: automated, never
answered)."""


def allowed_invite(allow_rooms: Sequence[str], room_id: str, inviter: str) -> bool:
    """Whether ``allow_rooms`` lets the bot accept ``inviter``'s invite to ``room_id``."""
    return ANY_INVITER in allow_rooms or room_id in allow_rooms or inviter in allow_rooms


def mentions(content: Mapping[str, Any], user_id: str, names: Iterable[str]) -> bool:
    """Whether a message's content mentions ``user_id``.

    With ``m.mentions`` (Matrix 1.7 intentional mentions) only its ``user_ids`` count: the spec
    turns the keyword rules off for such messages, and so does this. Without it (older clients)
    the legacy rules apply: the user id in the body or in a link of the formatted body, or one
    of the display ``names`` as a whole word, ignoring case."""
    declared = content.get("m.mentions")
    if isinstance(declared, dict):
        ids = declared.get("user_ids")
        return isinstance(ids, list) and user_id in ids
    body = content.get("body")
    body = body if isinstance(body, str) else ""
    formatted = content.get("formatted_body")
    formatted = formatted if isinstance(formatted, str) else ""
    if user_id in body or user_id in formatted or quote(user_id, safe="") in formatted:
        return True
    for name in names:
        name = name.strip()
        if name and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", body, re.IGNORECASE):
            return True
    return False


def strip_reply_fallback(body: str) -> str:
    """A reply's body without the quoted original older clients prepend (``> <@a:b> ...``)."""
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    index = 0
    while index < len(lines) and lines[index].startswith(">"):
        index += 1
    if index < len(lines) and not lines[index].strip():
        index += 1
    return "\n".join(lines[index:])


def inbound_of(
    channel: str,
    room_id: str,
    event: Mapping[str, Any],
    *,
    user_id: str,
    names: Iterable[str],
    is_direct: bool,
    sender_name: str = "",
) -> InboundMessage | None:
    """The message a room event is for reel, or None when it is none: not an
    ``m.room.message``, the bot's own, an ``m.notice`` (automated: never answered), an edit
    (the original was handed in), or a kind of message reel does not read."""
    if event.get("type") != "m.room.message":
        return None
    sender, event_id = event.get("sender"), event.get("event_id")
    content = event.get("content")
    if not isinstance(sender, str) or not isinstance(event_id, str) or sender == user_id:
        return None
    if not isinstance(content, dict):
        return None
    relates = content.get("m.relates_to")
    relates = relates if isinstance(relates, dict) else {}
    if relates.get("rel_type") == "m.replace" or "m.new_content" in content:
        return None
    thread = relates.get("event_id") if relates.get("rel_type") == "m.thread" else None
    msgtype, body = content.get("msgtype"), content.get("body")
    body = body if isinstance(body, str) else ""
    attachments: tuple[Attachment, ...] = ()
    if msgtype in _TEXT_TYPES:
        text = strip_reply_fallback(body) if "m.in_reply_to" in relates else body
    elif msgtype in _ATTACHMENT_TYPES:
        info = content.get("info")
        info = info if isinstance(info, dict) else {}
        filename = content.get("filename")
        name = filename if isinstance(filename, str) and filename else body
        url, mime, size = content.get("url"), info.get("mimetype"), info.get("size")
        attachments = (
            Attachment(
                name=name[:NAME_MAX_CHARS],
                content_type=mime[:NAME_MAX_CHARS] if isinstance(mime, str) else "",
                url=url[:ID_MAX_CHARS] if isinstance(url, str) else "",
                size=size if isinstance(size, int) and size >= 0 else 0,
            ),
        )
        text = body if name != body else ""  # a body beside a filename is a caption
    else:
        return None
    return InboundMessage(
        channel=channel,
        conversation=room_id,
        sender=sender,
        text=text,
        message_id=event_id,
        thread=thread if isinstance(thread, str) else None,
        sender_name=sender_name[:NAME_MAX_CHARS],
        is_direct=is_direct,
        mentions_agent=mentions(content, user_id, names),
        attachments=attachments,
    )


def new_since(events: Sequence[Mapping[str, Any]], user_id: str) -> int:
    """In the first timeline of a room the bot just joined: the index of the first event that
    is new to it (after its invite when the timeline shows it, else after its join; 0 when
    neither is there, since the timeline then began after the join)."""
    for membership in ("invite", "join"):
        for index in range(len(events) - 1, -1, -1):
            event = events[index]
            content = event.get("content")
            if (
                event.get("type") == "m.room.member"
                and event.get("state_key") == user_id
                and isinstance(content, dict)
                and content.get("membership") == membership
            ):
                return index + 1
    return 0


def outbound_content(message: OutboundMessage) -> dict[str, Any]:
    """An ``m.notice`` for one reply part: a rich reply to the message answered (first part),
    in its thread when it came in one, mentioning nobody (``m.mentions`` empty: an answer that
    quotes a name must not ping that person)."""
    content: dict[str, Any] = {"msgtype": "m.notice", "body": message.text, "m.mentions": {}}
    reply_to = message.in_reply_to if message.part == 1 else ""
    if message.thread:
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": message.thread,
            "is_falling_back": not reply_to,
            "m.in_reply_to": {"event_id": reply_to or message.thread},
        }
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content
