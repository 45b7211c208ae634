"""Routing into sessions: one session per conversation, or per sender when isolated; messages
merged within the coalescing window; the same message id starting at most one run, also across
a restart; per-sender flood control with its refusals recorded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from events.catalog import ChannelMessageRefused
from tests.transports.channels.kit import (
    SECRET,
    HttpNode,
    channel,
    channel_node,
    close_node,
    decision,
    events_of,
    message,
    run_of,
)
from tests.transports.http.httpkit import eventually

GROUP: dict[str, Any] = {"conversation": "team-room", "mentions_agent": True}


def group(node: HttpNode, text: str, sender: str, **rest: Any) -> dict[str, Any]:
    return decision(node, "hook", message(text, sender=sender, **GROUP, **rest))


def test_isolation_off_one_session_per_conversation(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(broadcast="allow")})
    try:
        alice = group(node, "hi", "@alice:localhost")
        bob = group(node, "hi", "@bob:localhost")
        assert alice["session_id"] == bob["session_id"]
        assert alice["session_key"] == bob["session_key"] == "hook:team-room"
        runs = [run_of(node, r["run_id"]) for r in (alice, bob)]
        assert [r["principal"] for r in runs] == [
            "channel:hook:@alice:localhost",
            "channel:hook:@bob:localhost",
        ]
        other = decision(
            node, "hook", message("hi", conversation="other-room", mentions_agent=True)
        )
        assert other["session_id"] != alice["session_id"]
    finally:
        close_node(node)


def test_isolation_on_one_session_per_sender(data_dir: Path) -> None:
    node = channel_node(
        data_dir, {"hook": channel(broadcast="allow", isolate_session_by_sender=True)}
    )
    try:
        alice = group(node, "hi", "@alice:localhost")
        bob = group(node, "hi", "@bob:localhost")
        alice_again = group(node, "again", "@alice:localhost")
        assert alice["session_id"] != bob["session_id"]
        assert alice_again["session_id"] == alice["session_id"]
        assert alice["session_key"] == "hook:team-room:sender:@alice:localhost"
        session = node.call("GET", f"/v1/sessions/{alice['session_id']}").json()
        assert session["principal"] == "channel:hook:@alice:localhost"  # the sender owns it
    finally:
        close_node(node)


def test_messages_within_the_window_become_one_run(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="allow", coalesce_ms=400)})
    try:
        import concurrent.futures

        texts = ["first line", "second line", "third line"]
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            futures = []
            for text in texts:
                futures.append(pool.submit(decision, node, "hook", message(text, is_direct=True)))
                time.sleep(0.05)
            results = [f.result() for f in futures]
        assert len({r["run_id"] for r in results}) == 1
        assert [r["route"] for r in results] == ["run", "coalesced", "coalesced"]
        run = run_of(node, results[0]["run_id"])
        assert run["answer"].split() == ["first", "line", "second", "line", "third", "line"]
        # a command and a message with an attachment are never held back
        command = decision(node, "hook", message("!reel status", is_direct=True))
        assert command["route"] == "command"
        started = time.monotonic()
        file = {"name": "report.pdf", "content_type": "application/pdf"}
        attached = decision(node, "hook", message("see file", is_direct=True, attachments=[file]))
        assert attached["route"] == "run" and time.monotonic() - started < 0.4
        assert (
            "[attachment: report.pdf, application/pdf]"
            in run_of(node, attached["run_id"])["answer"]
        )
        # another sender's messages are not merged with these
        bob = decision(node, "hook", message("bob here", sender="@bob:localhost", is_direct=True))
        assert bob["run_id"] != results[0]["run_id"]
    finally:
        close_node(node)


def test_the_same_message_id_starts_at_most_one_run_even_after_a_restart(data_dir: Path) -> None:
    hook = {"hook": channel(dm_policy="allow")}
    node = channel_node(data_dir, hook)
    try:
        first = decision(node, "hook", message("once", mid="$event-1", is_direct=True))
        assert first["accepted"] and first["run_id"]
        again = decision(node, "hook", message("once", mid="$event-1", is_direct=True))
        assert again["duplicate"] is True and again["accepted"] is False and again["run_id"] is None
        run_of(node, first["run_id"])
    finally:
        close_node(node)
    node = channel_node(data_dir, hook)
    try:
        replayed = decision(node, "hook", message("once", mid="$event-1", is_direct=True))
        assert replayed["duplicate"] is True
        runs = node.call("GET", "/v1/runs").json()["items"]
        assert [r["run_id"] for r in runs] == [first["run_id"]]
        assert "reel_channel_duplicates_total 1" in node.call("GET", "/metrics").body.decode()
        fresh = decision(node, "hook", message("twice", mid="$event-2", is_direct=True))
        assert fresh["accepted"]
    finally:
        close_node(node)


def test_a_flooding_sender_is_limited_and_the_refusals_recorded(data_dir: Path) -> None:
    node = channel_node(
        data_dir, {"hook": channel(dm_policy="allow", rate_limit_per_minute=6, rate_burst=3)}
    )
    try:
        results = [decision(node, "hook", message(f"m{i}", is_direct=True)) for i in range(20)]
        assert [r["accepted"] for r in results[:3]] == [True] * 3
        assert {r["reason"] for r in results[3:]} == {"rate_limited"}
        others = decision(node, "hook", message("me too", sender="@bob:localhost", is_direct=True))
        assert others["accepted"]  # per sender
        refused = events_of(node, ChannelMessageRefused)
        # a flood is recorded once a second with a count, not once per message
        assert 1 <= len(refused) < 17
        assert all(r.reason == "rate_limited" for r in refused)
        time.sleep(1.05)
        decision(node, "hook", message("late", is_direct=True))
        refused = events_of(node, ChannelMessageRefused)
        assert len(refused) + sum(r.suppressed for r in refused) == 18
    finally:
        close_node(node)


def test_a_disabled_channel_refuses_and_records(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(enabled=False, dm_policy="allow")})
    try:
        refused = decision(node, "hook", message("hi", is_direct=True))
        assert refused["reason"] == "channel_disabled"
        kinds = eventually(
            lambda: [e.kind for e in node.runtime.journal.read_stream("channel/hook")]
        )
        assert kinds == ["channel.message_refused"]
        listed = node.call("GET", "/v1/channels").json()["items"]
        assert listed[0]["name"] == "hook" and listed[0]["enabled"] is False
        assert SECRET not in node.call("GET", "/v1/channels").body.decode()
    finally:
        close_node(node)
