"""The Matrix connector on a real node (in-process) against a real Synapse: mentions in group
rooms (``m.mentions`` and the display-name fallback), threads, history never replayed, the
invite allow-list, direct rooms remembered across a restart, acknowledgements and split
replies, bad input answered, a replayed sync deduplicated, and configs refused with the key."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path
from typing import Any

import pytest
from nio import AsyncClient  # type: ignore[import-untyped]  # matrix-nio ships no type information

from actors.channels.config import ChannelConfig
from events.catalog import ChannelMessageRefused, ChannelMessageRouted, ChannelReplySent
from tests.transports.channels.kit import events_of, hub_of
from tests.transports.channels_matrix.kit import WAIT_S, Person, run, settled, unique
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from transports.channels import ChannelHub
from transports.channels.matrix import MatrixConnector
from transports.config import ConfigError

PASSWORD_ENV = "REEL_TEST_MATRIX_BOT_PASSWORD"
STREAM = "channel/mx"


def make_bot(
    homeserver: Homeserver, monkeypatch: pytest.MonkeyPatch, display_name: str = ""
) -> str:
    """A bot account, its password in the environment as an operator would put it."""
    password = secrets.token_hex(12)
    bot_id = homeserver.register(unique("bot"), password)
    monkeypatch.setenv(PASSWORD_ENV, password)
    if display_name:

        async def rename() -> None:
            client = AsyncClient(homeserver.base_url, bot_id)
            await client.login(password)
            await client.set_displayname(display_name)
            await client.logout()
            await client.close()

        run(rename())
    return bot_id


def matrix(server: Homeserver, bot_id: str, **policy: Any) -> ChannelConfig:
    """A matrix channel for ``bot_id`` on ``server`` (unless ``homeserver`` says otherwise),
    accepting every invite (unless ``allow_rooms`` does)."""
    policy.setdefault("allow_rooms", ("*",))
    policy.setdefault("homeserver", server.base_url)
    return ChannelConfig(kind="matrix", user_id=bot_id, password_env=PASSWORD_ENV, **policy)


def start(data_dir: Path, config: ChannelConfig) -> HttpNode:
    return open_node(data_dir, channels={"mx": config})


def connector(node: HttpNode) -> MatrixConnector:
    found = hub_of(node.runtime).connectors["mx"]
    assert isinstance(found, MatrixConnector)
    return found


def routed(node: HttpNode) -> dict[str, ChannelMessageRouted]:
    return {e.message_id: e for e in events_of(node, ChannelMessageRouted, STREAM)}


def refused(node: HttpNode) -> dict[str, str]:
    return {e.message_id: e.reason for e in events_of(node, ChannelMessageRefused, STREAM)}


async def replay_sync(mx: MatrixConnector, since: str) -> None:
    """On the node's loop: end the sync loop, rewind its token, start the loop again (what a
    reconnect that resumes from an older token does; the login is kept)."""
    loop_task = mx._loop_task
    assert loop_task is not None
    mx._stopping = True
    loop_task.cancel()
    await asyncio.gather(loop_task, return_exceptions=True)
    mx._stopping = False
    mx.since = since
    mx._loop_task = asyncio.create_task(mx._sync_loop())


def mention(user_id: str) -> dict[str, Any]:
    return {"m.mentions": {"user_ids": [user_id]}}


def test_in_a_group_room_only_messages_that_mention_the_bot_are_answered(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch, display_name="Reel Helper")
    alice = Person(homeserver, "alice")
    config = matrix(homeserver, bot, broadcast="mention_only", rate_burst=20)
    node = start(data_dir, config)
    said: dict[str, str] = {}

    async def scenario() -> None:
        async with alice:
            room = await alice.room([])
            said["history"] = await alice.say(
                room, "Reel Helper: said before you came", **mention(bot)
            )
            await alice.invite(room, bot)
            await alice.joined(room, bot)
            said["plain"] = await alice.say(room, "just chatting among humans")
            said["declared"] = await alice.say(room, "what is the time?", **mention(bot))
            answer = await alice.reply_containing(room, bot, "what is the time?")
            assert answer["content"]["msgtype"] == "m.notice"
            assert answer["content"]["m.relates_to"] == {
                "m.in_reply_to": {"event_id": said["declared"]}
            }
            said["named"] = await alice.say(room, "reel helper, and the weather?")
            await alice.reply_containing(room, bot, "and the weather?")
            said["by_id"] = await alice.say(room, f"{bot} are you there?")
            await alice.reply_containing(room, bot, "are you there?")
            # m.mentions present and not naming the bot: the name in the body is no mention
            said["silent"] = await alice.say(room, "Reel Helper is nice", **{"m.mentions": {}})
            said["root"] = await alice.say(room, "a thread starts here")
            thread = {"rel_type": "m.thread", "event_id": said["root"]}
            said["threaded"] = await alice.say(
                room, "a question in the thread", **mention(bot), **{"m.relates_to": thread}
            )
            reply = await alice.reply_containing(room, bot, "a question in the thread")
            relation = reply["content"]["m.relates_to"]
            assert relation["rel_type"] == "m.thread" and relation["event_id"] == said["root"]
            assert relation["m.in_reply_to"] == {"event_id": said["threaded"]}
            assert len(alice.texts_from(room, bot)) == 4  # one answer per mention, no more

    try:
        run(scenario())
        decisions = routed(node)
        ids = dict(said)
        assert set(decisions) == {ids[k] for k in ("declared", "named", "by_id", "threaded")}
        assert all(d.mentioned and not d.is_direct for d in decisions.values())
        assert decisions[ids["threaded"]].thread == ids["root"]
        assert refused(node) == {
            ids["plain"]: "mention_required",
            ids["silent"]: "mention_required",
            ids["root"]: "mention_required",
        }
        assert ids["history"] not in decisions  # what was said before the invite is history
    finally:
        close_node(node)


def test_an_invite_not_on_the_allow_list_is_rejected(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch)
    alice, mallory = Person(homeserver, "alice"), Person(homeserver, "mallory")
    node = start(data_dir, matrix(homeserver, bot, allow_rooms=(alice.user_id,)))

    async def scenario() -> None:
        async with alice, mallory:
            theirs = await mallory.room([bot], direct=True)
            ours = await alice.room([bot], direct=True)
            await alice.joined(ours, bot)
            await mallory.until(
                lambda: mallory.membership.get((theirs, bot)) == "leave", "the invite rejected"
            )

    try:
        run(scenario())

        def shown() -> dict[str, Any]:
            (info,) = node.call("GET", "/v1/channels").json()["items"]
            return dict(info["connector"])

        # once the bot's own sync shows the room
        assert eventually(lambda: shown()["direct_rooms"] == 1, timeout=WAIT_S)
        assert shown() == {
            "homeserver": homeserver.base_url,
            "user_id": bot,
            "password_env": PASSWORD_ENV,
            "connected": True,
            "rooms": 1,
            "direct_rooms": 1,
            "allow_rooms": 1,
            "rate_limited": 0,
            "reconnects": 0,
            "refused_invites": 1,
        }
    finally:
        close_node(node)


def test_a_direct_room_stays_direct_after_a_restart(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Matrix marks a room direct only on the invite; the bot records it in ``m.direct`` (its
    account data), which the next start reads."""
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    config = matrix(homeserver, bot, dm_policy="allow")
    nodes = [start(data_dir, config)]

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            await alice.say(room, "hello")
            await alice.reply_containing(room, bot, "hello")
            await asyncio.to_thread(close_node, nodes.pop())
            nodes.append(await asyncio.to_thread(start, data_dir, config))
            said = await alice.say(room, "still direct?")  # no mention: fine in a direct room
            await alice.reply_containing(room, bot, "still direct?")
            assert routed(nodes[0])[said].is_direct

    try:
        run(scenario())
    finally:
        for node in nodes:
            close_node(node)


def test_acknowledged_with_a_reaction_and_a_long_answer_split(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    config = matrix(homeserver, bot, dm_policy="allow", ack="react", reply_max_chars=40)
    node = start(data_dir, config)
    words = " ".join(f"word{i}" for i in range(20))  # 139 characters: 4 parts of <= 40

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            asked = await alice.say(room, words)
            await alice.reply_containing(room, bot, "word19")
            sent = alice.said_by(room, bot)
            reaction, *parts = sent
            assert reaction["type"] == "m.reaction"
            assert reaction["content"]["m.relates_to"] == {
                "rel_type": "m.annotation",
                "event_id": asked,
                "key": "\N{EYES}",
            }
            texts = [p["content"]["body"] for p in parts]
            assert " ".join(texts) == words and all(len(t) <= 40 for t in texts)
            assert len(texts) == 4
            assert parts[0]["content"]["m.relates_to"] == {"m.in_reply_to": {"event_id": asked}}
            assert all("m.relates_to" not in p["content"] for p in parts[1:])

    try:
        run(scenario())
        (sent,) = eventually(lambda: events_of(node, ChannelReplySent, STREAM), timeout=WAIT_S)
        assert sent.ok and sent.parts == 4
    finally:
        close_node(node)


def test_a_message_over_the_size_cap_is_answered_not_routed(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    node = start(data_dir, matrix(homeserver, bot, dm_policy="allow", max_message_bytes=64))

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            await alice.say(room, "x" * 100)
            notice = await alice.reply_containing(room, bot, "not accepted")
            assert notice["content"]["body"] == (
                "Your message was not accepted: text: the message is 100 bytes; the limit is 64."
            )

    try:
        run(scenario())
        assert routed(node) == {} and refused(node) == {}
    finally:
        close_node(node)


def test_a_replayed_sync_starts_one_run_per_event(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connector that syncs again from an older token (a reconnect that replays) hands the
    same events in again; the hub's idempotency by event id drops them: one run, one answer."""
    bot = make_bot(homeserver, monkeypatch)
    alice = Person(homeserver, "alice")
    node = start(data_dir, matrix(homeserver, bot, dm_policy="allow"))
    mx = connector(node)
    hub = hub_of(node.runtime)

    async def scenario() -> None:
        async with alice:
            room = await alice.room([bot], direct=True)
            await alice.joined(room, bot)
            before = mx.since
            assert before is not None
            asked = await alice.say(room, "only once please")
            await alice.reply_containing(room, bot, "only once please")
            await asyncio.wrap_future(node.runtime.node.io.submit(replay_sync(mx, before)))
            await settled(lambda: hub.duplicates >= 1, "the replayed event reaching the hub")
            assert hub.duplicates == 1
            await asyncio.sleep(1.0)  # time for a second answer, were one coming
            await alice.sync()
            assert alice.texts_from(room, bot) == ["only once please"]
            runs = [m for m in events_of(node, ChannelMessageRouted, STREAM)]
            assert [m.message_id for m in runs] == [
                asked
            ]  # platform ids are kept verbatim (PlatformId)

    try:
        run(scenario())
    finally:
        close_node(node)


def test_configs_the_connector_cannot_use_are_refused_naming_the_key(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch)
    good = matrix(homeserver, bot)

    def refusal(config: ChannelConfig, environ: dict[str, str]) -> str:
        with pytest.raises(ConfigError) as caught:
            ChannelHub({"mx": config}, environ)
        return str(caught.value)

    env = {PASSWORD_ENV: "x"}
    assert refusal(good, {}) == (
        f"config key channels.mx.password_env: the environment variable {PASSWORD_ENV} is not set"
    )
    both = ChannelConfig(**{**_fields(good), "access_token_env": "T"})
    assert "exactly one of password_env and access_token_env" in refusal(both, env)
    assert "homeserver" in refusal(ChannelConfig(**{**_fields(good), "homeserver": "ftp://x"}), env)
    assert "user_id" in refusal(ChannelConfig(**{**_fields(good), "user_id": "bot"}), env)
    assert "allow_rooms: 'everyone'" in refusal(
        ChannelConfig(**{**_fields(good), "allow_rooms": ("everyone",)}), env
    )
    assert "outbound_url: a matrix channel does not take it" in refusal(
        ChannelConfig(**{**_fields(good), "outbound_url": "https://hooks.example.org"}), env
    )
    # a wrong password stops the node at start, naming the key, never quoting the password
    wrong = "wrong-" + secrets.token_hex(8)
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    with pytest.raises(ConfigError) as caught:
        start(data_dir, good)
    message = str(caught.value)
    assert message.startswith("config key channels.mx.password_env: the homeserver refused")
    assert "M_FORBIDDEN" in message and wrong not in message


def _fields(config: ChannelConfig) -> dict[str, Any]:
    return {f: getattr(config, f) for f in config.__struct_fields__}
