"""The router's decision table: each rule in its documented order, with no node, clock or I/O
(``route`` is a pure function of the policy, the folded state, the sender's bucket and the
message)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.aggregate import fold as aggregate_fold
from actors.channels import pairing, router
from actors.channels.config import ChannelConfig
from actors.channels.message import InboundMessage, InvalidMessage, check_inbound
from actors.channels.router import (
    PAIRING_INVALID_REPLY,
    Accept,
    Bucket,
    ChannelState,
    Command,
    Pair,
    Refuse,
    apply,
    route,
    session_key,
    take,
)
from actors.stream import Recorded
from events.catalog import (
    ChannelPairCodeMinted,
    ChannelPairingRequested,
    ChannelPairingResolved,
    Event,
)
from events.fields import SESSION_KEY
from events.redaction.redact import looks_secret
from transports.channels import split_text

NOW = 1_800_000_000_000
ALICE = "@alice:localhost"
PRINCIPAL = f"channel:hook:{ALICE}"


def policy(**overrides: Any) -> ChannelConfig:
    return ChannelConfig(kind="webhook", **overrides)


def msg(text: str = "hello", **overrides: Any) -> InboundMessage:
    fields: dict[str, Any] = {
        "channel": "hook",
        "conversation": "room-1",
        "sender": ALICE,
        "text": text,
        "message_id": "m1",
    }
    fields.update(overrides)
    return InboundMessage(**fields)


def fold(events: list[tuple[Event, int]]) -> ChannelState:
    """The channel ``hook``'s state after ``(event, commit time)`` pairs on its stream."""
    state = aggregate_fold(router, [Recorded(e, "channel/hook", at, "node") for e, at in events])
    assert state is not None
    return state


def paired_state(until_ms: int) -> ChannelState:
    return fold(
        [
            (
                ChannelPairingRequested(
                    channel="hook",
                    approval_id="a1",
                    code_id="c1",
                    principal=PRINCIPAL,
                    conversation="dm",
                    expires_at_ms=NOW,
                ),
                NOW - 10,
            ),
            (
                ChannelPairingResolved(
                    channel="hook",
                    approval_id="a1",
                    principal=PRINCIPAL,
                    decision="allow",
                    decided_by="admin",
                    allowed_until_ms=until_ms,
                ),
                NOW - 5,
            ),
        ]
    )


def decide(
    config: ChannelConfig,
    message: InboundMessage,
    state: ChannelState | None = None,
    bucket: Bucket | None = None,
) -> Any:
    return route(config, state or ChannelState(), message, PRINCIPAL, bucket, NOW).decision


DM: dict[str, Any] = {"is_direct": True, "conversation": "dm-alice"}
EMPTY = Bucket(0.0, NOW)

# (policy, message, state, bucket) -> refusal reason, or the decision type when not refused
TABLE: list[tuple[str, dict[str, Any], dict[str, Any], ChannelState | None, Bucket | None, Any]] = [
    # 1. enabled comes first: even a denied, flooding sender hears channel_disabled
    ("disabled", {"enabled": False, "deny_from": (ALICE,)}, DM, None, EMPTY, "channel_disabled"),
    # 2. the deny list beats the allow list, pairing and flood control
    (
        "denied",
        {"deny_from": (ALICE,), "allow_from": (ALICE,), "dm_policy": "allow"},
        DM,
        paired_state(NOW + 1000),
        EMPTY,
        "sender_denied",
    ),
    ("denied *", {"deny_from": ("*",), "dm_policy": "allow"}, DM, None, None, "sender_denied"),
    # 3. flood control before everything that reads the message
    ("flood", {"dm_policy": "allow"}, DM, None, EMPTY, "rate_limited"),
    # 4. pair CODE in a DM under dm_policy pairing, even when the allow list does not name them
    (
        "pair",
        {"dm_policy": "pairing", "allow_from": ("@bob:x",)},
        {**DM, "text": "pair ABCD1234"},
        None,
        None,
        Pair,
    ),
    (
        "pair in an open group is text",
        {"dm_policy": "pairing", "group_policy": "open", "broadcast": "allow"},
        {"text": "pair ABCD1234", "mentions_agent": True},
        None,
        None,
        Accept,
    ),
    (
        "pair in a pairing group is no pairing request",
        {"dm_policy": "pairing", "broadcast": "allow"},
        {"text": "pair ABCD1234", "mentions_agent": True},
        None,
        None,
        "pairing_required",
    ),
    (
        "pair under group_policy pairing alone",
        {"dm_policy": "deny", "group_policy": "pairing"},
        {**DM, "text": "pair ABCD1234"},
        None,
        None,
        Pair,
    ),
    (
        "pair when dm allow is text",
        {"dm_policy": "allow"},
        {**DM, "text": "pair ABCD1234"},
        None,
        None,
        Accept,
    ),
    # 5. the allow list
    (
        "not listed",
        {"allow_from": ("@bob:x",), "broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        "not_allowed",
    ),
    (
        "not listed, dm pairing",
        {"allow_from": ("@bob:x",), "dm_policy": "pairing"},
        DM,
        None,
        None,
        "pairing_required",
    ),
    ("listed", {"allow_from": (ALICE,), "dm_policy": "allow"}, DM, None, None, Accept),
    (
        "paired counts as listed",
        {"allow_from": ("@bob:x",), "dm_policy": "pairing"},
        DM,
        paired_state(NOW + 1000),
        None,
        Accept,
    ),
    (
        "pairing lapsed",
        {"allow_from": ("@bob:x",), "dm_policy": "pairing"},
        DM,
        paired_state(NOW - 1),
        None,
        "pairing_required",
    ),
    # 6. direct-message policy
    ("dm deny", {"dm_policy": "deny"}, DM, None, None, "dm_denied"),
    (
        "dm deny beats the allow list",
        {"dm_policy": "deny", "allow_from": (ALICE,)},
        DM,
        None,
        None,
        "dm_denied",
    ),
    ("dm pairing, not paired", {"dm_policy": "pairing"}, DM, None, None, "pairing_required"),
    ("dm pairing, paired", {"dm_policy": "pairing"}, DM, paired_state(NOW + 1), None, Accept),
    ("dm allow", {"dm_policy": "allow"}, DM, None, None, Accept),
    # 6. group policy: pairing by default when dm_policy is pairing, else open
    (
        "group, dm pairing, not paired",
        {"dm_policy": "pairing", "broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        "pairing_required",
    ),
    (
        "group, dm pairing, paired",
        {"dm_policy": "pairing", "broadcast": "allow"},
        {"mentions_agent": True},
        paired_state(NOW + 1),
        None,
        Accept,
    ),
    (
        "group pairing comes before the mention",
        {"dm_policy": "pairing", "broadcast": "allow"},
        {},
        None,
        None,
        "pairing_required",
    ),
    (
        "group pairing, listed",
        {"group_policy": "pairing", "allow_from": (ALICE,), "broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        Accept,
    ),
    (
        "group open under dm pairing",
        {"dm_policy": "pairing", "group_policy": "open", "broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        Accept,
    ),
    (
        "group disabled, even paired",
        {"dm_policy": "pairing", "group_policy": "disabled", "broadcast": "allow"},
        {"mentions_agent": True},
        paired_state(NOW + 1),
        None,
        "group_denied",
    ),
    (
        "group disabled leaves direct messages",
        {"dm_policy": "allow", "group_policy": "disabled"},
        DM,
        None,
        None,
        Accept,
    ),
    (
        "group open by default without dm pairing",
        {"dm_policy": "deny", "broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        Accept,
    ),
    # 7. mention requirement in groups
    ("group, no mention", {"broadcast": "allow"}, {}, None, None, "mention_required"),
    (
        "group, platform mention",
        {"broadcast": "allow"},
        {"mentions_agent": True},
        None,
        None,
        Accept,
    ),
    (
        "group, pattern mention",
        {"broadcast": "allow", "mention_patterns": (r"^reel[,:]",)},
        {"text": "Reel: hi"},
        None,
        None,
        Accept,
    ),
    (
        "group, mention optional",
        {"broadcast": "allow", "require_mention": False},
        {},
        None,
        None,
        Accept,
    ),
    # 8. broadcast: the agent never answers in a group under deny
    ("broadcast deny", {}, {"mentions_agent": True}, None, None, "broadcast_denied"),
    ("broadcast deny is after mention", {}, {}, None, None, "mention_required"),
    # 9. commands after every gate
    ("command", {"dm_policy": "allow"}, {**DM, "text": "!reel status"}, None, None, Command),
    (
        "command needs the gates",
        {"dm_policy": "deny"},
        {**DM, "text": "!reel status"},
        None,
        None,
        "dm_denied",
    ),
    ("not a command", {"dm_policy": "allow"}, {**DM, "text": "!reelx status"}, None, None, Accept),
]


@pytest.mark.parametrize(
    ("config", "fields", "state", "bucket", "expected"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_decision_table(
    config: dict[str, Any],
    fields: dict[str, Any],
    state: ChannelState | None,
    bucket: Bucket | None,
    expected: Any,
) -> None:
    decision = decide(policy(**config), msg(**fields), state, bucket)
    if isinstance(expected, str):
        assert isinstance(decision, Refuse), decision
        assert decision.reason == expected
        assert decision.detail
    else:
        assert isinstance(decision, expected), decision


def test_refusals_that_tell_the_sender_and_those_that_stay_silent() -> None:
    needs_pairing = decide(policy(dm_policy="pairing"), msg(**DM))
    assert isinstance(needs_pairing, Refuse) and "pair CODE" in (needs_pairing.reply or "")
    unmentioned = decide(policy(broadcast="allow"), msg())
    assert isinstance(unmentioned, Refuse) and unmentioned.reply is None  # groups stay quiet
    unpaired_in_group = decide(policy(dm_policy="pairing", broadcast="allow"), msg())
    assert isinstance(unpaired_in_group, Refuse) and unpaired_in_group.reply is None
    denied = decide(policy(deny_from=(ALICE,)), msg(**DM))
    assert isinstance(denied, Refuse) and denied.reply is None


def test_broadcast_decides_whether_the_answer_goes_back() -> None:
    mentioned = msg(mentions_agent=True)
    quiet = msg()
    allow = policy(broadcast="allow", require_mention=False)
    mention_only = policy(broadcast="mention_only", require_mention=False)
    assert decide(allow, quiet).reply is True
    assert decide(mention_only, mentioned).reply is True
    assert decide(mention_only, quiet).reply is False  # routed into the session, not answered
    assert decide(policy(dm_policy="allow"), msg(**DM)).reply is True  # a DM is answered


def test_session_keys_per_conversation_or_per_sender() -> None:
    shared = session_key("hook", "room-1")
    assert shared == "hook:room-1"
    assert session_key("hook", "room-1", ALICE) == "hook:room-1:sender:@alice:localhost"
    assert session_key("hook", "room-1", ALICE) != session_key("hook", "room-1", "@bob:localhost")
    isolated = decide(
        policy(broadcast="allow", isolate_session_by_sender=True), msg(mentions_agent=True)
    )
    together = decide(policy(broadcast="allow"), msg(mentions_agent=True))
    assert isolated.session_key.endswith(":sender:@alice:localhost")
    assert together.session_key == "hook:room-1"


@pytest.mark.parametrize(
    "conversation",
    ["!OGEhHVWSdvArJzumhm:matrix.org", "room with spaces", "a=b", "ünïcødé", "x" * 300, "a\nb"],
)
def test_any_conversation_id_makes_a_valid_distinct_key(conversation: str) -> None:
    key = session_key("matrix", conversation)
    assert SESSION_KEY.pattern.fullmatch(key) and not looks_secret(key)
    assert key != session_key("matrix", conversation + "x")


def test_escaping_is_injective() -> None:
    # "=" is escaped too, so no conversation id can spell another one's escape
    assert session_key("c", "a b") != session_key("c", "a=20b")
    assert session_key("c", "a=20b") == "c:a=3D20b"


def test_the_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = None
    outcomes = []
    for _ in range(7):
        ok, bucket = take(bucket, per_minute=60, burst=5, now_ms=NOW)
        outcomes.append(ok)
    assert outcomes == [True] * 5 + [False] * 2
    ok, bucket = take(bucket, per_minute=60, burst=5, now_ms=NOW + 1000)  # one a second
    assert ok
    ok, _ = take(bucket, per_minute=60, burst=5, now_ms=NOW + 1000)
    assert not ok


def minted(code: str, expires_at_ms: int) -> ChannelState:
    salt, digest = pairing.minted(code)
    event = ChannelPairCodeMinted(
        channel="hook",
        code_id="c1",
        salt=salt,
        digest=digest,
        kdf=pairing.KDF,
        expires_at_ms=expires_at_ms,
    )
    return fold([(event, NOW - 1000)])


def test_a_code_matches_until_it_expires_or_is_used() -> None:
    code = pairing.new_code()
    state = minted(code, NOW + 60_000)
    found = pairing.match(state, code.lower(), NOW)  # typed in lower case
    assert found is not None and found.code_id == "c1"
    assert pairing.match(state, code, NOW + 60_000) is None  # expired
    assert pairing.match(state, "ZZZZZZZZ", NOW) is None  # wrong
    assert pairing.match(state, "short", NOW) is None  # malformed
    request = ChannelPairingRequested(
        channel="hook",
        approval_id="a1",
        code_id="c1",
        principal=PRINCIPAL,
        conversation="dm",
        expires_at_ms=NOW + 1,
    )
    after = apply(state, Recorded(request, "channel/hook", NOW, "node"))
    assert pairing.match(after, code, NOW) is None  # single use
    assert PAIRING_INVALID_REPLY == pairing.INVALID_REPLY


def test_split_text_keeps_every_word_and_respects_the_limit() -> None:
    text = " ".join(f"word{i}" for i in range(400))
    parts = split_text(text, 100)
    assert all(len(p) <= 100 for p in parts)
    assert " ".join(parts).split() == text.split()
    assert split_text("short", 100) == ["short"]
    assert "".join(split_text("x" * 250, 100)) == "x" * 250  # no space: cut mid-word


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"conversation": ""}, "conversation"),
        ({"message_id": " "}, "message_id"),
        ({"message_id": "m" * 300}, "message_id"),
        ({"text": "x" * 40_000}, "text"),
        ({"text": "   "}, "text"),
        ({"sender": ""}, "sender"),
        ({"sender": "@alice smith:localhost"}, "sender"),
        ({"sender": "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"}, "sender"),
        (
            {"sender": "reel_01KAZQ5W3J8D4M2N6P0R7T9V1X_" + "q8Zk-2LmNpQ4rS7t" * 2 + "U1vW3xY5zA6"},
            "sender",
        ),
        ({"sender": "reel_admin_" + "Xy9_kL2mNpQ4-rS7" * 2 + "tU1vW3xY5zA"}, "sender"),
        ({"sender_name": "n" * 200}, "sender_name"),
    ],
)
def test_bad_input_is_refused_naming_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        check_inbound(msg(**fields), 32 * 1024)
    assert refused.value.field == field
    assert "ghp_" not in str(refused.value)
