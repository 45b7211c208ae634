"""The Matrix connector when the network gets in the way, against a real Synapse: a cut
connection is reconnected with backoff and every message sent meanwhile is answered once (a
timeline the homeserver cut short is backfilled). Rate limits: test_matrix_ratelimit.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from events.catalog import ChannelMessageRouted
from tests.transports.channels.kit import events_of
from tests.transports.channels_matrix.kit import Cable, Person, run, settled
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.channels_matrix.test_matrix_connector import (
    STREAM,
    connector,
    make_bot,
    matrix,
    start,
)
from tests.transports.http.httpkit import close_node
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
