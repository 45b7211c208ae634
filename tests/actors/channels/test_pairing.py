"""Pairing: an operator mints a code, a sender sends ``pair CODE`` in a direct message, the
request waits as an approval (subject pairing) every approval surface shows, and an approved
sender may talk to the agent for the channel's pairing period. Wrong, expired and used codes
get one and the same answer."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from actors.channels import pairing
from events import Journal, NodeKey, new_id
from events.catalog import ChannelPairCodeMinted
from tests.transports.channels.kit import (
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    decision,
    message,
)
from tests.transports.http.httpkit import eventually

BOB = "@bob:localhost"


def dm(node: HttpNode, text: str, sender: str = "@alice:localhost") -> dict[str, Any]:
    conversation = f"dm-{sender}"
    return decision(
        node, "hook", message(text, sender=sender, is_direct=True, conversation=conversation)
    )


def mint(node: HttpNode, ttl: str = "10m") -> str:
    reply = node.call("POST", "/v1/channels/hook/pair-codes", {"ttl": ttl})
    assert reply.status == 201, reply.body
    code: str = reply.json()["code"]
    assert len(code) == 8
    return code


def pending_pairings(node: HttpNode) -> list[dict[str, Any]]:
    page = node.call("GET", "/v1/approvals?state=pending").json()
    return [a for a in page["items"] if a["subject"] == "pairing"]


def test_a_paired_and_approved_sender_may_talk(data_dir: Path, receiver: Receiver) -> None:
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="pairing")})
    try:
        before = dm(node, "hello")
        assert before["reason"] == "pairing_required" and not before["accepted"]
        assert "pair CODE" in receiver.wait_for("pairing code").body["text"]
        code = mint(node)
        asked = dm(node, f"pair {code}")
        assert asked["accepted"] and asked["route"] == "pairing"
        receiver.wait_for("Pairing requested")
        (approval,) = eventually(lambda: pending_pairings(node))
        assert approval["principal"] == "channel:hook:@alice:localhost"
        assert approval["arguments"]["channel"] == "hook"
        assert [o["scope"] for o in approval["options"]] == ["once"]
        decided = node.call(
            "POST", f"/v1/approvals/{approval['approval_id']}", {"decision": "allow"}
        )
        assert decided.status == 200, decided.body
        assert decided.json()["decided_by"] == "admin"
        assert decided.json()["state"] == "resolved"
        receiver.wait_for("Pairing approved")
        after = dm(node, "hello again")
        assert after["accepted"] and after["run_id"]
        # a second decision on the same request is a conflict
        again = node.call("POST", f"/v1/approvals/{approval['approval_id']}", {"decision": "deny"})
        assert again.status == 409
    finally:
        close_node(node)
    # the pairing survives a restart: it is a fold of the channel's stream
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="pairing")})
    try:
        assert dm(node, "still me")["accepted"]
        assert dm(node, "and you?", sender=BOB)["reason"] == "pairing_required"
    finally:
        close_node(node)


def test_wrong_used_and_expired_codes_get_the_same_answer(
    data_dir: Path, receiver: Receiver
) -> None:
    expired = "EXP1RED0"
    salt, digest = pairing.minted(expired)
    with Journal(
        data_dir / "journal.db", node_key=NodeKey.load_or_create(data_dir / "node.key")
    ) as j:
        j.append(
            "channel/hook",
            [
                ChannelPairCodeMinted(
                    channel="hook",
                    code_id=new_id(),
                    salt=salt,
                    digest=digest,
                    kdf=pairing.KDF,
                    expires_at_ms=int(time.time() * 1000) - 1,
                )
            ],
            expected_seq=0,
            principal="admin",
        )
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="pairing")})
    try:
        code = mint(node)
        assert dm(node, f"pair {code}")["accepted"]  # alice uses it up
        answers = []
        for sender, text in (
            (BOB, f"pair {code}"),
            (BOB, "pair ZZZZZZZZ"),
            (BOB, f"pair {expired}"),
            (BOB, "pair x"),
        ):
            refused = dm(node, text, sender=sender)
            assert refused["reason"] == "pairing_code_invalid" and not refused["accepted"]
            answers.append((refused["detail"], refused["reason"]))
        assert len(set(answers)) == 1  # no oracle: used, wrong, expired, malformed alike
        texts = [r.body["text"] for r in receiver.wait(5) if r.body["conversation"] == f"dm-{BOB}"]
        assert texts == [pairing.INVALID_REPLY] * 4
        kinds = [e.kind for e in node.runtime.journal.read_stream("channel/hook")]
        assert kinds.count("channel.message_refused") == 4
    finally:
        close_node(node)


def test_the_journal_never_holds_a_code(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="pairing")})
    try:
        codes = [mint(node) for _ in range(3)]
        assert dm(node, f"pair {codes[0]}")["accepted"]
        journal = node.runtime.journal
        for stored in journal.read(0, 10_000):
            for code in codes:
                assert code.encode() not in stored.payload
                assert code.lower().encode() not in stored.payload
    finally:
        close_node(node)


def test_a_denied_or_expired_request_leaves_the_sender_unpaired(
    data_dir: Path, receiver: Receiver
) -> None:
    hook = channel(receiver, dm_policy="pairing", pairing_pending="1s")
    node = channel_node(data_dir, {"hook": hook})
    try:
        assert dm(node, f"pair {mint(node)}")["accepted"]
        (approval,) = eventually(lambda: pending_pairings(node))
        scoped = node.call(
            "POST",
            f"/v1/approvals/{approval['approval_id']}",
            {"decision": "allow", "scope": "always"},
        )
        assert scoped.status == 400 and scoped.error["field"] == "$.scope"
        denied = node.call(
            "POST",
            f"/v1/approvals/{approval['approval_id']}",
            {"decision": "deny", "reason": "who?"},
        )
        assert denied.status == 200 and denied.json()["decision"] == "deny"
        receiver.wait_for("not approved")
        assert dm(node, "hello")["reason"] == "pairing_required"
        # nobody answers the next request: the node denies it when it expires
        assert dm(node, f"pair {mint(node)}", sender=BOB)["accepted"]

        def expired() -> dict[str, Any] | None:
            page = node.call("GET", "/v1/approvals?state=resolved").json()["items"]
            return next((a for a in page if a["principal"].endswith(BOB)), None)

        record = eventually(expired, timeout=10)
        assert record is not None
        assert record["decision"] == "deny" and record["decided_by"] == "node"
        assert record["decided_reason"] == "expired"
    finally:
        close_node(node)


def test_pair_code_ttl_is_checked(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="pairing")})
    try:
        for ttl in ("5s", "2d", "soon", "10"):
            reply = node.call("POST", "/v1/channels/hook/pair-codes", {"ttl": ttl})
            assert reply.status == 400 and reply.error["field"] == "$.ttl", ttl
        assert node.call("POST", "/v1/channels/nope/pair-codes", {}).status == 404
        default = node.call("POST", "/v1/channels/hook/pair-codes", {}).json()
        assert 590_000 < default["expires_at_ms"] - time.time() * 1000 <= 600_000
    finally:
        close_node(node)
