"""What a Matrix event means to reel, rule by rule, on events shaped as Synapse sends them (no
homeserver needed: the translation is pure). The same rules run against a real Synapse in
test_matrix_connector.py."""

from __future__ import annotations

from typing import Any

import pytest

from transports.channels import InboundMessage, OutboundMessage
from transports.channels.matrix_events import (
    allowed_invite,
    inbound_of,
    mentions,
    new_since,
    outbound_content,
    strip_reply_fallback,
)

BOT = "@reel:example.org"
ALICE = "@alice:example.org"
ROOM = "!room:example.org"


def message(content: dict[str, Any], sender: str = ALICE, event_id: str = "$e1") -> dict[str, Any]:
    return {"type": "m.room.message", "sender": sender, "event_id": event_id, "content": content}


def read(event: dict[str, Any], *, direct: bool = False) -> InboundMessage | None:
    return inbound_of("mx", ROOM, event, user_id=BOT, names=["Reel"], is_direct=direct)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"body": "hi", "m.mentions": {"user_ids": [BOT]}}, True),
        ({"body": "hi", "m.mentions": {"user_ids": [ALICE]}}, False),
        ({"body": "Reel, hi", "m.mentions": {}}, False),  # m.mentions turns the fallback off
        ({"body": "hi", "m.mentions": {"room": True}}, False),  # @room is not the bot
        ({"body": "Reel, hi"}, True),  # the display name, any case, as a word
        ({"body": "hey REEL"}, True),
        ({"body": "reels of film"}, False),  # not a whole word
        ({"body": f"{BOT} hi"}, True),  # the user id
        (
            {
                "body": "reel: hi",
                "formatted_body": '<a href="https://matrix.to/#/%40reel%3Aexample.org">x</a>',
            },
            True,
        ),
        ({"body": "nobody here"}, False),
    ],
)
def test_mentions(content: dict[str, Any], expected: bool) -> None:
    assert mentions(content, BOT, ["Reel"]) is expected


def test_a_text_message_becomes_an_inbound_message() -> None:
    got = read(message({"msgtype": "m.text", "body": "hello"}), direct=True)
    assert got is not None
    assert (got.channel, got.conversation, got.sender, got.message_id) == ("mx", ROOM, ALICE, "$e1")
    assert got.text == "hello" and got.is_direct and got.thread is None
    assert not got.mentions_agent


def test_a_thread_reply_names_its_root() -> None:
    relates = {"rel_type": "m.thread", "event_id": "$root", "is_falling_back": True}
    got = read(message({"msgtype": "m.text", "body": "in thread", "m.relates_to": relates}))
    assert got is not None and got.thread == "$root"


def test_what_is_not_for_reel_is_none() -> None:
    assert read(message({"msgtype": "m.text", "body": "mine"}, sender=BOT)) is None
    assert read(message({"msgtype": "m.notice", "body": "a bot"})) is None
    edit = {
        "msgtype": "m.text",
        "body": "* fixed",
        "m.new_content": {"msgtype": "m.text", "body": "fixed"},
        "m.relates_to": {"rel_type": "m.replace", "event_id": "$e0"},
    }
    assert read(message(edit)) is None
    assert read(message({"msgtype": "m.location", "body": "here", "geo_uri": "geo:0,0"})) is None
    assert read({"type": "m.reaction", "sender": ALICE, "event_id": "$r", "content": {}}) is None
    assert read({"type": "m.room.message", "sender": ALICE, "content": {"body": "x"}}) is None


def test_a_reply_loses_the_quoted_fallback() -> None:
    body = "> <@bob:example.org> earlier words\n> more\n\nmy answer"
    relates = {"m.in_reply_to": {"event_id": "$e0"}}
    got = read(message({"msgtype": "m.text", "body": body, "m.relates_to": relates}))
    assert got is not None and got.text == "my answer"
    assert strip_reply_fallback("> not a reply really") == ""
    assert strip_reply_fallback("plain\n> quote") == "plain\n> quote"


def test_a_file_is_an_attachment_never_its_bytes() -> None:
    content = {
        "msgtype": "m.file",
        "body": "report.pdf",
        "url": "mxc://example.org/abc",
        "info": {"mimetype": "application/pdf", "size": 1234},
    }
    got = read(message(content))
    assert got is not None and got.text == ""
    (attachment,) = got.attachments
    assert attachment.name == "report.pdf" and attachment.url == "mxc://example.org/abc"
    assert attachment.content_type == "application/pdf" and attachment.size == 1234
    captioned = read(message({**content, "filename": "report.pdf", "body": "see this"}))
    assert captioned is not None and captioned.text == "see this"


def test_only_what_follows_the_invite_is_new_in_a_room_just_joined() -> None:
    def member(membership: str) -> dict[str, Any]:
        return {"type": "m.room.member", "state_key": BOT, "content": {"membership": membership}}

    said = message({"msgtype": "m.text", "body": "x"})
    assert new_since([said, member("invite"), said, member("join"), said], BOT) == 2
    assert new_since([said, member("join"), said], BOT) == 2  # history hidden until the join
    assert new_since([said, said], BOT) == 0  # the join was before this timeline


def test_the_invite_allow_list() -> None:
    assert allowed_invite(["*"], ROOM, ALICE)
    assert allowed_invite([ROOM], ROOM, "@mallory:example.org")
    assert allowed_invite([ALICE], "!other:example.org", ALICE)
    assert not allowed_invite([ALICE], ROOM, "@mallory:example.org")
    assert not allowed_invite([], ROOM, ALICE)


def test_replies_are_notices_that_ping_nobody() -> None:
    def out(**fields: Any) -> dict[str, Any]:
        return outbound_content(
            OutboundMessage(channel="mx", conversation=ROOM, text="answer", **fields)
        )

    assert out() == {"msgtype": "m.notice", "body": "answer", "m.mentions": {}}
    assert out(in_reply_to="$q")["m.relates_to"] == {"m.in_reply_to": {"event_id": "$q"}}
    assert "m.relates_to" not in out(in_reply_to="$q", part=2, parts=2)
    assert out(in_reply_to="$q", thread="$root")["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": False,
        "m.in_reply_to": {"event_id": "$q"},
    }
    assert out(thread="$root", part=2, parts=2)["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$root"},
    }
