"""A real 429: a homeserver whose message rate limit the bot meets (Synapse's own
``rc_message``, as a homeserver admin sets it). The connector waits each one out in the task
of that reply, says so (a warning line, a counter), and keeps reading and routing meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.transports.channels_matrix.kit import Person, run, settled
from tests.transports.channels_matrix.synapse import Homeserver, start_homeserver
from tests.transports.channels_matrix.test_matrix_connector import (
    STREAM,
    connector,
    make_bot,
    matrix,
    start,
)
from tests.transports.channels_matrix.test_matrix_faults import LOGGER, logged
from tests.transports.http.httpkit import close_node

PER_SECOND = 0.4
BURST = 2
"""The bot's rate: its join and first answer pass, then each event waits ~2.5 s (time enough
to see other work go on)."""


@pytest.fixture(scope="module")
def homeserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Homeserver]:
    limit = {"per_second": PER_SECOND, "burst_count": BURST}
    server = start_homeserver(tmp_path_factory.mktemp("synapse"), rc_message=limit)
    try:
        yield server
    finally:
        server.stop()


def test_a_rate_limited_reply_waits_visibly_and_other_work_goes_on(
    homeserver: Homeserver,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    homeserver.override_ratelimit(alice.user_id, per_second=0, burst=0)  # only the bot waits
    node = start(data_dir, matrix(homeserver, bot, dm_policy="allow"))
    mx = connector(node)

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            await alice.say(room, "one")
            await alice.reply_containing(room, bot, "one")
            await alice.say(room, "two")
            await settled(lambda: mx.rate_limited >= 1, "the bot meeting a 429")
            # the answer to "two" waits for the homeserver; the bot still reads and routes
            await alice.say(room, "three")
            await alice.reply_containing(room, bot, "three")
            await alice.sync()
            assert alice.texts_from(room, bot) == ["one", "two", "three"]  # in order, once each

    try:
        run(scenario())
        # "three" was routed before the answer to "two" could go out: the wait held up nothing
        routed, sent = "channel.message_routed", "channel.reply_sent"
        kinds = [e.kind for e in node.runtime.journal.read_stream(STREAM)]
        order = [k for k in kinds if k in (routed, sent)]
        assert order == [routed, sent, routed, routed, sent, sent]
        delayed = logged(caplog, "matrix request delayed")
        assert delayed
        fields = delayed[0].reel_fields  # type: ignore[attr-defined]
        assert fields["request"] == "send" and fields["problem"].startswith("rate-limited")
        assert 0 < fields["retry_in_s"] <= 1 / PER_SECOND
        (info,) = node.call("GET", "/v1/channels").json()["items"]
        assert info["connector"]["rate_limited"] == mx.rate_limited >= 1
    finally:
        close_node(node)
