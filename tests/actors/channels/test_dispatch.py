"""Nothing an accepted message is owed is lost when the node stops between two of its records
(docs/channels.md, "Nothing lost across a stop"): held in a coalescing window, requested but
never asked for, started but never recorded as started. Each case stops a real node at that
point, starts it again on the same data dir and checks the sender gets exactly one answer from
exactly one run. Also: a clean stop answers the runs that end while the node drains before it
stops the channels; a refused message delivered again is recorded once; a coalescing window
never grows past what the node accepts as one run's input."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.channels.actor import ChannelActor
from actors.channels.dispatch import regroup
from actors.channels.message import InboundMessage
from actors.channels.results import RouteResult
from events import JournalUnavailable
from events.catalog import (
    ChannelMessageRefused,
    ChannelMessageRouted,
    ChannelRunNotStarted,
    ChannelRunRequested,
    ChannelRunStarted,
)
from tests.transports.channels.kit import (
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    events_of,
    hub_of,
    message,
    route,
    run_of,
)
from tests.transports.http.httpkit import eventually
from transports.channels.webhook import WebhookConnector
from transports.config import ProviderConfig, SessionsConfig


def hand_in(node: HttpNode, text: str, mid: str, sender: str = "@alice:localhost") -> RouteResult:
    """What a connector does: hand a direct message in; done once the decision is durable."""
    inbound = InboundMessage(
        channel="hook",
        conversation="dm-alice",
        sender=sender,
        text=text,
        message_id=mid,
        is_direct=True,
    )
    return hub_of(node.runtime).receive(inbound, until_run=False).result(timeout=10)


def test_a_window_whose_request_cannot_be_recorded_answers_its_callers(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Callers waiting on a coalescing window hear the journal's refusal when its request
    cannot be recorded, instead of waiting for ever; the next message is decided as usual."""
    appended = ChannelActor._append

    def refusing(self: ChannelActor, event: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(event, ChannelRunRequested) and refused:
            raise JournalUnavailable("the journal is not available")
        return appended(self, event, *args, **kwargs)

    refused = [True]
    monkeypatch.setattr(ChannelActor, "_append", refusing)
    node = channel_node(data_dir, {"hook": channel(dm_policy="allow", coalesce_ms=200)})
    try:
        reply = route(node, "hook", message("held", is_direct=True))
        assert reply.status == 503 and reply.error["code"] == "unavailable", reply.body
        assert events_of(node, ChannelRunRequested) == []
        refused.clear()
        assert route(node, "hook", message("next", is_direct=True)).status == 200
    finally:
        close_node(node)


def runs(node: HttpNode) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.call("GET", "/v1/runs").json()["items"]
    return items


def answers(receiver: Receiver) -> list[str]:
    return [r.body["in_reply_to"] for r in receiver.received]


def test_messages_held_in_a_coalescing_window_start_their_run_at_the_next_start(
    data_dir: Path, receiver: Receiver
) -> None:
    hook = {"hook": channel(receiver, dm_policy="allow", coalesce_ms=60_000)}
    node = channel_node(data_dir, hook)
    try:
        first = hand_in(node, "first held line", "$held-1")
        second = hand_in(node, "second held line", "$held-2")
        assert (first.route, second.route) == ("run", "coalesced")
        assert first.accepted and first.run_id is None  # recorded; the window is still open
    finally:
        close_node(node)  # inside the 60 s window
    assert not runs_on_disk(data_dir)
    node = channel_node(data_dir, hook)
    try:
        answer = receiver.wait_for("first held line")
        assert "second held line" in answer.body["text"]
        (run,) = runs(node)
        assert run_of(node, run["run_id"])["state"] == "done"
        (requested,) = events_of(node, ChannelRunRequested)
        assert requested.message_ids == ("$held-1", "$held-2")
        assert requested.run_id == run["run_id"]
        (started,) = events_of(node, ChannelRunStarted)
        assert started.in_reply_to == ("$held-1", "$held-2")
        # delivered again by the platform: a duplicate, no second run
        assert hand_in(node, "first held line", "$held-1").duplicate
        assert len(runs(node)) == 1 and len(receiver.received) == 1
    finally:
        close_node(node)


def runs_on_disk(data_dir: Path) -> list[dict[str, Any]]:
    """The runs a node on ``data_dir`` knows (one without the channel, so nothing is resumed
    by looking)."""
    node = channel_node(data_dir, {})
    try:
        return runs(node)
    finally:
        close_node(node)


def test_the_backlog_is_asked_for_before_what_a_connector_hears_at_start(
    data_dir: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connector that hands a message in as soon as it starts (a sync loop catching up) does
    not get its run asked for before the held messages of the last stop."""
    node = channel_node(
        data_dir, {"hook": channel(receiver, dm_policy="allow", coalesce_ms=60_000)}
    )
    try:
        hand_in(node, "older, held at the stop", "$older")
    finally:
        close_node(node)
    started = WebhookConnector.start

    async def start_then_hear(self: WebhookConnector, inbound: Any) -> None:
        await started(self, inbound)
        newer = InboundMessage(
            channel="hook",
            conversation="dm-alice",
            sender="@alice:localhost",
            text="newer, heard at start",
            message_id="$newer",
            is_direct=True,
        )
        asyncio.get_running_loop().create_task(inbound(newer))

    monkeypatch.setattr(WebhookConnector, "start", start_then_hear)
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")})
    try:
        asked = eventually(lambda: len(got := events_of(node, ChannelRunRequested)) == 2 and got)
        assert asked, "two runs requested"
        assert [r.message_ids for r in asked] == [("$older",), ("$newer",)]
        receiver.wait_for("newer, heard at start")
        receiver.wait_for("older, held at the stop")
    finally:
        close_node(node)


def test_a_run_requested_but_never_asked_for_is_asked_for_with_the_same_run_id(
    data_dir: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = {"hook": channel(receiver, dm_policy="allow")}
    with monkeypatch.context() as patch:
        patch.setattr(ChannelActor, "_ask", lambda self, batch: None)  # stops right here
        node = channel_node(data_dir, hook)
        try:
            hand_in(node, "asked for later", "$asked-1")
            (requested,) = eventually(lambda: events_of(node, ChannelRunRequested))
            assert runs(node) == []
        finally:
            close_node(node)
    node = channel_node(data_dir, hook)
    try:
        assert "asked for later" in receiver.wait_for("asked for later").body["text"]
        (run,) = runs(node)
        assert run["run_id"] == requested.run_id
        assert [e.run_id for e in events_of(node, ChannelRunStarted)] == [requested.run_id]
    finally:
        close_node(node)


def test_a_run_the_session_accepted_before_the_stop_is_not_started_twice(
    data_dir: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = {"hook": channel(receiver, dm_policy="allow")}
    # the session accepts the run; the node stops before the channel records it as started
    with monkeypatch.context() as patch:
        patch.setattr(ChannelActor, "_dispatched", lambda self, message: None)
        node = channel_node(data_dir, hook)
        try:
            hand_in(node, "accepted once", "$once-1")
            (run,) = eventually(lambda: runs(node))
            assert run_of(node, run["run_id"])["state"] == "done"
            assert events_of(node, ChannelRunStarted) == [] and receiver.received == []
        finally:
            close_node(node)
    node = channel_node(data_dir, hook)
    try:
        assert "accepted once" in receiver.wait_for("accepted once").body["text"]
        assert [r["run_id"] for r in runs(node)] == [run["run_id"]]
        # submitted, not waited for, before the answer went out (actor.py: _dispatched)
        started = eventually(lambda: [e.run_id for e in events_of(node, ChannelRunStarted)])
        assert started == [run["run_id"]]
        assert answers(receiver) == ["$once-1"]
    finally:
        close_node(node)
    node = channel_node(data_dir, hook)  # a third start finds nothing left to do
    try:
        assert len(runs(node)) == 1 and len(receiver.received) == 1
        assert len(events_of(node, ChannelRunRequested)) == 1
    finally:
        close_node(node)


def test_a_run_the_node_refuses_is_recorded_and_not_asked_for_again(
    data_dir: Path, receiver: Receiver
) -> None:
    # the channel takes 32 KiB messages; the node takes 200 bytes as a run's input
    hook = {"hook": channel(receiver, dm_policy="allow")}
    small = SessionsConfig(max_message_bytes=200)
    node = channel_node(data_dir, hook, sessions=small)
    try:
        reply = route(node, "hook", message("x" * 300, mid="$big-1", is_direct=True))
        assert reply.status == 400 and "text" in reply.json()["error"]["message"]
        (refused,) = events_of(node, ChannelRunNotStarted)
        assert "300 bytes" in refused.error
    finally:
        close_node(node)
    node = channel_node(data_dir, hook, sessions=small)
    try:
        assert runs(node) == []
        assert len(events_of(node, ChannelRunRequested)) == 1
    finally:
        close_node(node)


def test_a_coalescing_window_never_outgrows_one_run_input(data_dir: Path) -> None:
    hook = {"hook": channel(dm_policy="allow", coalesce_ms=60_000)}
    node = channel_node(data_dir, hook, sessions=SessionsConfig(max_message_bytes=100))
    try:
        for i in range(3):
            hand_in(node, f"line {i} " + "y" * 40, f"$w-{i}")
        # the third would take the window over 100 bytes: the first two start their run now
        (requested,) = eventually(lambda: events_of(node, ChannelRunRequested))
        assert requested.message_ids == ("$w-0", "$w-1")
        (run,) = eventually(lambda: runs(node))
        assert run_of(node, run["run_id"])["state"] == "done"
    finally:
        close_node(node)


def test_a_refused_message_delivered_again_is_recorded_once(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="deny")})
    try:
        for _ in range(3):
            assert hand_in(node, "hello?", "$no-1").reason == "dm_denied"
        (refused,) = events_of(node, ChannelMessageRefused)
        assert refused.message_id == "$no-1"
        metrics = node.call("GET", "/metrics").body.decode()
        assert "reel_channel_duplicates_total 2" in metrics
        assert hand_in(node, "hello?", "$no-2").reason == "dm_denied"
        assert len(events_of(node, ChannelMessageRefused)) == 2
    finally:
        close_node(node)


def routed(mid: str, conversation: str, sender: str, text: str) -> ChannelMessageRouted:
    return ChannelMessageRouted(
        channel="hook",
        message_id=mid,
        conversation=conversation,
        principal=f"channel:hook:{sender}",
        session_key=f"hook:{conversation}",
        is_direct=True,
        reply=mid != "m2",
        input=text,
    )


def test_regroup_merges_each_senders_messages_in_order_within_the_cap() -> None:
    messages = [
        routed("m1", "a", "@x", "one"),
        routed("m2", "b", "@y", "two"),
        routed("m3", "a", "@x", "three"),
        routed("m4", "a", "@x", "four"),
    ]
    batches = regroup("hook", messages, max_bytes=len("one\nthree"))
    assert [(b.message_ids, b.text, b.reply) for b in batches] == [
        (["m1", "m3"], "one\nthree", True),
        (["m2"], "two", False),
        (["m4"], "four", True),
    ]
    assert all(b.run_id is None and not b.waiting for b in batches)
    # a direct conversation's session is labelled with its sender, as when routed live
    assert [b.label for b in batches] == ["hook: @x", "hook: @y", "hook: @x"]
    group = msgspec.structs.replace(routed("m5", "room", "@z", "hi"), is_direct=False)
    assert regroup("hook", [group], max_bytes=100)[0].label == "hook: room"


def test_a_clean_stop_answers_runs_ending_in_the_drain_then_stops_the_channels(
    data_dir: Path, receiver: Receiver
) -> None:
    slow = ProviderConfig(chunk_delay_s=0.1)  # a run of a few words takes a few tenths
    node = channel_node(data_dir, {"hook": channel(receiver, dm_policy="allow")}, provider=slow)
    hub = hub_of(node.runtime)
    connector = hub.connectors["hook"]
    try:
        hand_in(node, "still going when the stop begins", "$drain-1")
        eventually(lambda: events_of(node, ChannelRunStarted))
    finally:
        # a grace the run needs even on a loaded machine (a stop waits only as long as it runs)
        node.server.close()
        node.runtime.close(15.0)
    assert "still going" in receiver.wait_for("still going", timeout=1).body["text"]
    assert hub.actors == {} and isinstance(connector, WebhookConnector)
    assert connector._session is None  # its HTTP client closed, not left to the collector
