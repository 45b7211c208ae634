"""A chat sender is a principal ``channel:<channel>:<sender>``: the journal takes the ids chat
platforms give their users, and still refuses anything shaped like a secret or outside the
pattern."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from events import Journal, NodeKey
from events.catalog import ChannelMessageRefused
from events.fields import PRINCIPAL, InvalidField
from events.redaction.redact import looks_secret, redact_text

SENDERS = [
    "channel:matrix:@alice:localhost",
    "channel:matrix:@bob.smith:matrix.example.org",
    "channel:matrix:@x=2fy/z:example.org:8448",  # a Matrix localpart may hold = and /
    "channel:matrix:@carol+test:example.org",
    "channel:webhook:alice@example.com",
    "channel:slack:U024BE7LH",
    "channel:telegram:-1001234567890",
]
REFUSED = [
    "channel:matrix:@alice smith:localhost",  # a space
    "channel:matrix:@alice:localhost\n",  # a newline
    "channel:webhook:bob;drop",  # punctuation outside the pattern
    "@alice:localhost",  # must start with a letter or digit
    "channel:webhook:" + "a" * 200,  # too long
    "channel:webhook:ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X",  # a GitHub token's shape
    "channel:webhook:"
    + "reel_01KAZQ5W3J8D4M2N6P0R7T9V1X_"
    + "q8Zk-2LmNpQ4rS7t" * 2
    + "U1vW3xY5zA6",  # a reel token's
    "channel:webhook:"
    + "reel_admin_"
    + "Xy9_kL2mNpQ4-rS7" * 2
    + "tU1vW3xY5zA",  # a reel admin token's
]


@pytest.mark.parametrize("principal", SENDERS)
def test_a_chat_sender_is_a_valid_principal(principal: str) -> None:
    assert PRINCIPAL.problem(principal, looks_secret) is None


@pytest.mark.parametrize("principal", REFUSED)
def test_what_is_not_an_id_or_looks_secret_is_refused(principal: str) -> None:
    assert PRINCIPAL.problem(principal, looks_secret) is not None


def refusal(principal: str) -> ChannelMessageRefused:
    return ChannelMessageRefused(
        channel="matrix",
        message_id="$ev1",
        conversation="!room:localhost",
        principal=principal,
        reason="dm_denied",
    )


def test_the_journal_stores_a_sender_principal_in_clear_and_refuses_a_secret(
    tmp_path: Path,
) -> None:
    with Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "k")) as j:
        sender = "channel:matrix:@x=2fy/z:example.org"
        j.append("channel/matrix", [refusal(sender)], expected_seq=0, principal=sender)
        stored = j.read_stream("channel/matrix")[0]
        assert stored.principal == sender
        decoded = stored.decode()
        assert isinstance(decoded, ChannelMessageRefused)
        assert decoded.principal == sender
        with pytest.raises(InvalidField) as refused:
            j.append("channel/matrix", [refusal(REFUSED[-1])], expected_seq=1, principal="node")
        assert refused.value.field == "principal"
        assert "ghp_" not in str(refused.value)
        assert len(j.read_stream("channel/matrix")) == 1


def test_platform_ids_are_stored_verbatim_even_when_shaped_like_tokens(tmp_path: Path) -> None:
    """A Matrix event id can look like a token to the redactor; masking it would send a reply
    to a masked room after a restart. Platform ids are checked against their pattern instead."""
    token_like = "$AKIAIOSFODNN7EXAMPLE"
    assert redact_text(token_like)[1] == 1  # as free text it would have been masked
    with Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "k")) as j:
        event = msgspec.structs.replace(refusal(SENDERS[0]), message_id=token_like)
        j.append("channel/matrix", [event], expected_seq=0, principal=SENDERS[0])
        decoded = j.read_stream("channel/matrix")[0].decode()
        assert isinstance(decoded, ChannelMessageRefused)
        assert decoded.message_id == token_like and decoded.redacted == 0
        for bad in ("has a space", "line\nbreak", "ünïcode", "x" * 256):
            with pytest.raises(InvalidField) as refused:
                j.append(
                    "channel/matrix",
                    [msgspec.structs.replace(event, conversation=bad)],
                    expected_seq=1,
                    principal="node",
                )
            assert refused.value.field == "conversation"
