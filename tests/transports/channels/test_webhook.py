"""The webhook connector over real HTTP both ways: a platform POSTs signed messages in, the node
POSTs signed replies out to a receiver that checks the signature itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from events.catalog import ChannelReplySent
from tests.transports.channels.kit import (
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    events_of,
    message,
    post_webhook,
    run_of,
    signature,
)
from tests.transports.http.httpkit import eventually


def test_a_signed_message_runs_and_the_signed_answer_comes_back(
    data_dir: Path, receiver: Receiver
) -> None:
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        raw = json.dumps(message("hello there", mid="evt-1", is_direct=True)).encode()
        reply = post_webhook(node, "hook", raw, signature(raw))
        assert reply.status == 200, reply.body
        decision = reply.json()
        assert decision["accepted"] is True and decision["route"] == "run"
        assert decision["principal"] == "channel:hook:@alice:localhost"
        run = run_of(node, decision["run_id"])
        assert run["principal"] == "channel:hook:@alice:localhost"
        answer = receiver.wait_for("hello there")
        assert answer.signed
        assert answer.body["conversation"] == "dm-alice"
        assert answer.body["in_reply_to"] == "evt-1"
        assert answer.body["run_id"] == decision["run_id"]
        kinds = [e.kind for e in node.runtime.journal.read_stream("channel/hook")]
        assert kinds[0] == "channel.message_routed"
        node_eventually_has(node, "channel.reply_sent")
    finally:
        close_node(node)


def node_eventually_has(node: HttpNode, kind: str) -> None:
    journal = node.runtime.journal
    assert eventually(lambda: kind in [e.kind for e in journal.read_stream("channel/hook")])


def test_a_bad_signature_is_401_and_records_nothing_but_the_counter(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="allow")})
    try:
        raw = json.dumps(message("hi", is_direct=True)).encode()
        head = node.runtime.journal.committed_position
        for sig in (
            None,
            "",
            "sha256=00",
            signature(raw, "another-secret-0123456789"),
            signature(raw + b" "),
            signature(raw).upper(),
        ):
            reply = post_webhook(node, "hook", raw, sig)
            assert reply.status == 401, (sig, reply.body)
            assert reply.error["code"] == "unauthenticated"
        assert node.runtime.journal.committed_position == head  # nothing recorded
        metrics = node.call("GET", "/metrics").body.decode()
        assert "reel_channel_webhook_bad_signatures_total 6" in metrics
        # the signature is checked before anything is parsed: garbage with a bad one is a 401
        assert post_webhook(node, "hook", b"\xff{", "sha256=1").status == 401
    finally:
        close_node(node)


def test_long_answers_are_split_to_the_platform_limit(data_dir: Path, receiver: Receiver) -> None:
    hook = channel(receiver, dm_policy="allow", reply_max_chars=40)
    node = channel_node(data_dir, {"hook": hook})
    try:
        words = " ".join(f"w{i:03d}" for i in range(60))
        raw = json.dumps(message(words, is_direct=True)).encode()
        decision = post_webhook(node, "hook", raw, signature(raw)).json()
        run_of(node, decision["run_id"])
        parts = receiver.wait(receiver.wait(1)[0].body["parts"])  # every part, not the first 6
        assert len(parts) >= 6
        assert all(p.signed for p in parts)
        assert all(len(p.body["text"]) <= 40 for p in parts)
        assert [p.body["part"] for p in parts] == list(range(1, len(parts) + 1))
        assert " ".join(p.body["text"] for p in parts).split() == words.split()
    finally:
        close_node(node)


def test_bad_input_is_a_clear_4xx(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="allow", max_message_bytes=1000)})
    try:

        def signed(body: object) -> tuple[int, dict[str, Any]]:
            raw = json.dumps(body).encode()
            reply = post_webhook(node, "hook", raw, signature(raw))
            return reply.status, reply.json()

        status, body = signed(message("x" * 1001, is_direct=True))  # over the channel's cap
        assert status == 400 and body["error"]["field"] == "$.text"
        assert "1001 bytes" in body["error"]["message"]
        status, body = signed(message("x" * 5000, is_direct=True))  # over the HTTP body cap
        assert status == 413 and body["error"]["code"] == "payload_too_large"
        status, body = signed({"conversation": "c", "sender": "s", "text": "t"})
        assert status == 400 and body["error"]["field"] == "$.message_id"
        status, body = signed({**message("t"), "extra": 1})
        assert status == 400 and body["error"]["field"] == "$.extra"
        status, body = signed(message("t", sender="bob smith"))
        assert status == 400 and body["error"]["field"] == "$.sender"
        raw = json.dumps(message("t")).encode()
        unknown = post_webhook(node, "nope", raw, signature(raw))
        assert unknown.status == 404 and "nope" in unknown.error["message"]
        api = node.call("POST", "/v1/channels/nope/messages", message("t"))
        assert api.status == 404
    finally:
        close_node(node)


def test_a_failing_platform_is_recorded_not_retried_forever(
    data_dir: Path, receiver: Receiver
) -> None:
    receiver.status = 500
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        raw = json.dumps(message("hello", is_direct=True)).encode()
        decision = post_webhook(node, "hook", raw, signature(raw)).json()
        run_of(node, decision["run_id"])
        receiver.wait(1)
        node_eventually_has(node, "channel.reply_sent")
        sent = events_of(node, ChannelReplySent)
        assert sent[0].ok is False and "500" in sent[0].error
    finally:
        close_node(node)


def test_an_acknowledgement_while_the_run_is_in_progress_then_the_answer_in_the_thread(
    data_dir: Path, receiver: Receiver
) -> None:
    hook = channel(receiver, dm_policy="allow", ack="message", ack_text="on it")
    node = channel_node(data_dir, {"hook": hook})
    try:
        body = message("/sleep 300\nslow one", mid="evt-7", is_direct=True, thread="t-1")
        raw = json.dumps(body).encode()
        decision = post_webhook(node, "hook", raw, signature(raw)).json()
        run_of(node, decision["run_id"])
        ack, answer = receiver.wait(2)
        assert ack.body["text"] == "on it" and ack.body["in_reply_to"] == "evt-7"
        assert answer.body["text"] == "slow one"
        assert ack.body["thread"] == answer.body["thread"] == "t-1"
        assert ack.signed and answer.signed
    finally:
        close_node(node)
