"""The Matrix connector when the network gets in the way, against a real Synapse: a cut
connection is reconnected with backoff and every message sent meanwhile is answered once (a
timeline the homeserver cut short is backfilled). Rate limits: test_matrix_ratelimit.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from events.catalog import ChannelCursorSaved, ChannelMessageRouted
from tests.transports.channels.kit import events_of, hub_of
from tests.transports.channels_matrix.kit import Cable, Person, run, settled
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.channels_matrix.test_matrix_connector import (
    STREAM,
    connector,
    make_bot,
    matrix,
    start,
)
from tests.transports.http.httpkit import HttpNode, close_node, eventually
from transports.channels import matrix as matrix_module

LOGGER = "reel.channels.matrix"


def logged(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == message]


def test_a_cut_connection_is_mended_and_nothing_is_lost_or_doubled(
    homeserver: Homeserver,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    # three events per room and sync: the five messages sent while cut come back "limited"
    small = {"room": {"timeline": {"limit": 3}}, "presence": {"types": []}}
    monkeypatch.setattr(matrix_module, "_FILTER", small)
    cable = Cable(int(homeserver.base_url.rpartition(":")[2]))
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    config = matrix(homeserver, bot, homeserver=cable.url, dm_policy="allow", rate_burst=20)
    node = start(data_dir, config)
    mx = connector(node)
    away = [f"said while you were away {i}" for i in range(5)]

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            await alice.say(room, "before")
            await alice.reply_containing(room, bot, "before")
            cable.cut()
            await settled(lambda: mx.reconnects >= 2, "the bot retrying twice")
            assert not mx.connected
            for text in away:
                await alice.say(room, text)
            cable.mend()
            for text in away:
                await alice.reply_containing(room, bot, text)
            await asyncio.sleep(0.5)  # time for a second answer, were one coming
            await alice.sync()
            assert sorted(alice.texts_from(room, bot)) == sorted(["before", *away])

    try:
        run(scenario())
        assert mx.connected
        failed = logged(caplog, "matrix sync failed; reconnecting")
        waits = [r.reel_fields["retry_in_s"] for r in failed]  # type: ignore[attr-defined]
        assert len(waits) >= 2 and waits[1] > waits[0]  # backing off, not hammering
        assert logged(caplog, "matrix reconnected")
        (backfill,) = logged(caplog, "matrix timeline backfilled")
        # at least one event came back through the backfill; how many depends on where the
        # homeserver cut the timeline (the bot's own acknowledgements count against the limit)
        assert backfill.reel_fields["events"] >= 1  # type: ignore[attr-defined]
        routed = [e.message_id for e in events_of(node, ChannelMessageRouted, STREAM)]
        assert len(routed) == len(set(routed)) == 6
    finally:
        close_node(node)
        cable.close()


def test_a_saved_cursor_the_homeserver_refuses_gives_way_to_a_catch_up(
    homeserver: Homeserver,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sync token the homeserver will never accept again (a wiped or migrated homeserver)
    must not leave the bot retrying it forever: it continues from now and hands in again what
    was said after its own last event, so the message sent while it was stopped is answered
    and nothing handled before the stop is answered twice."""
    caplog.set_level(logging.INFO, LOGGER)
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    config = matrix(homeserver, bot, dm_policy="allow", rate_burst=20)
    offline = matrix(homeserver, bot, homeserver="http://127.0.0.1:9")
    bogus = ChannelCursorSaved(channel="mx", cursor="x_not_a_sync_token")
    nodes: list[HttpNode] = []

    def refused_cursor_saved() -> None:
        # a node that cannot reach the homeserver saves no cursor of its own: the refused one
        # is the last on the stream when the next node starts
        quiet = start(data_dir, offline)
        try:
            hub_of(quiet.runtime)._record("mx", bogus, "node")
            assert eventually(
                lambda: (
                    [e.cursor for e in events_of(quiet, ChannelCursorSaved, STREAM)][-1:]
                    == [bogus.cursor]
                )
            )
        finally:
            close_node(quiet)

    async def scenario() -> None:
        async with alice:
            nodes.append(await asyncio.to_thread(start, data_dir, config))
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            await alice.say(room, "before the stop")
            await alice.reply_containing(room, bot, "before the stop")
            await asyncio.to_thread(close_node, nodes.pop())
            await alice.say(room, "said while stopped")
            await asyncio.to_thread(refused_cursor_saved)
            nodes.append(await asyncio.to_thread(start, data_dir, config))
            await alice.reply_containing(room, bot, "said while stopped")
            await alice.say(room, "after the restart")
            await alice.reply_containing(room, bot, "after the restart")
            await asyncio.sleep(0.5)  # time for a second answer, were one coming
            await alice.sync()
            assert sorted(alice.texts_from(room, bot)) == sorted(
                ["before the stop", "said while stopped", "after the restart"]
            )

    try:
        run(scenario(), timeout=180)
        (node,) = nodes
        assert logged(caplog, "matrix saved cursor refused; catching up from each room's history")
        routed = [e.message_id for e in events_of(node, ChannelMessageRouted, STREAM)]
        assert len(routed) == len(set(routed)) == 3
        saved = [e.cursor for e in events_of(node, ChannelCursorSaved, STREAM)]
        assert saved[-1] != bogus.cursor  # the next start does not meet it again
    finally:
        for node in nodes:
            close_node(node)
