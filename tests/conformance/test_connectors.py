"""Every channel connector against the connector conformance suite
(tests/conformance/connector.py): the webhook (signed POSTs in, a loopback receiver checking
the signed POSTs out) and Matrix (a real Synapse, people on real matrix-nio clients), each on a
real node."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from msgspec.structs import replace

from actors.channels.message import InboundMessage
from tests.conformance.connector import (
    WAIT_S,
    ConnectorConformance,
    ConnectorDriver,
    Conversation,
)
from tests.transports.channels.kit import (
    SECRET,
    SECRET_ENV,
    Receiver,
    channel,
    channel_node,
    post_webhook,
    signature,
)
from tests.transports.channels_matrix.kit import Person, unique
from tests.transports.channels_matrix.synapse import Homeserver, start_homeserver
from tests.transports.channels_matrix.test_matrix_connector import (
    PASSWORD_ENV,
    connector,
    matrix,
    replay_sync,
)
from tests.transports.http.httpkit import HttpNode, HttpReply, close_node, open_node
from transports.channels.connector import CONNECTORS
from transports.channels.webhook import WebhookConnector

T = TypeVar("T")
PEOPLE = ("alice", "bob", "mallory")


class WebhookDriver(ConnectorDriver):
    """The platform POSTs signed JSON to the node's webhook route; the node's answers reach a
    :class:`Receiver` that checks their signatures itself."""

    channel = "hook"

    def __init__(self, data_dir: Path, receiver: Receiver) -> None:
        self.data_dir, self.receiver = data_dir, receiver
        self.node: HttpNode | None = None
        self.sent: dict[str, bytes] = {}
        """Message id -> the raw body posted (a retry posts the same bytes)."""
        self.refused: dict[str, HttpReply] = {}
        """Message id -> the node's answer when it did not take the message (a 4xx)."""

    def start(self, **policy: Any) -> HttpNode:
        self.node = channel_node(self.data_dir, {self.channel: channel(self.receiver, **policy)})
        return self.node

    def close(self) -> None:
        if self.node is not None:
            close_node(self.node)

    def user(self, person: str) -> str:
        return f"{person}@example.org"

    def post(self, raw: bytes) -> HttpReply:
        assert self.node is not None
        reply = post_webhook(self.node, self.channel, raw, signature(raw))
        assert reply.status in (200, 400), reply.body  # a decision, or bad input named
        return reply

    def say(
        self,
        person: str,
        conversation: Conversation,
        text: str,
        *,
        mention: bool = False,
        thread: str | None = None,
    ) -> str:
        message_id = f"evt-{secrets.token_hex(6)}"
        body = {
            "message_id": message_id,
            "conversation": conversation.name,
            "sender": self.user(person),
            "text": text,
            "is_direct": conversation.direct,
            "mentions_agent": mention,
            "thread": thread,
        }
        self.sent[message_id] = raw = json.dumps(body).encode()
        reply = self.post(raw)
        if reply.status != 200:
            self.refused[message_id] = reply
        return message_id

    def not_accepted(self, conversation: Conversation, message_id: str) -> str:
        """The webhook's caller hears it in the answer to its POST."""
        error = self.refused[message_id].error
        assert error["code"] == "invalid_argument" and error["field"] == "$.text", error
        return str(error["message"])

    def deliver_again(self, conversation: Conversation, message_id: str) -> None:
        decision = self.post(self.sent[message_id]).json()
        assert decision["duplicate"] is True and decision["accepted"] is False

    def answers(self, conversation: Conversation, thread: str | None = None) -> list[str]:
        delivered = [
            r
            for r in list(self.receiver.received)
            if (r.body["conversation"], r.body["thread"]) == (conversation.name, thread)
        ]
        assert all(r.signed for r in delivered), "an answer went out without a valid signature"
        return [str(r.body["text"]) for r in delivered]


@contextlib.contextmanager
def webhook_driver(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookDriver]:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    receiver = Receiver().start()
    driver = WebhookDriver(data_dir, receiver)
    try:
        yield driver
    finally:
        driver.close()
        receiver.stop()


class TestWebhookConnector(ConnectorConformance):
    @pytest.fixture
    def driver(self, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectorDriver]:
        with webhook_driver(data_dir, monkeypatch) as driver:
            yield driver


async def together(works: Iterable[Coroutine[Any, Any, Any]]) -> None:
    await asyncio.gather(*works)


class MatrixWorld:
    """What the Matrix cases share, to keep their cost low: one homeserver, one bot account
    (each case's node logs it in, and out at its stop), three people whose clients live on one
    loop of their own, and the rooms they opened with the bot (a case reads only what the bot
    said after it began)."""

    def __init__(self, homeserver: Homeserver) -> None:
        self.homeserver = homeserver
        self.password = secrets.token_hex(12)
        self.bot = homeserver.register(unique("bot"), self.password)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.people = {name: Person(homeserver, name) for name in PEOPLE}
        self.call(together(p.login() for p in self.people.values()))
        self.rooms: dict[Conversation, str] = {}
        """The room opened for each conversation."""

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        async def bounded() -> T:
            return await asyncio.wait_for(work, 3 * WAIT_S)

        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result()

    def reader(self, conversation: Conversation) -> Person:
        """Whose client reads the conversation (its opener)."""
        return self.people[conversation.members[0]]

    def close(self) -> None:
        self.call(together(p.close() for p in self.people.values()))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class MatrixDriver(ConnectorDriver):
    """People on the homeserver say things in rooms with the bot (``m.mentions`` naming it for
    a mention); the bot's answers are what their own clients sync."""

    channel = "mx"

    def __init__(self, world: MatrixWorld, data_dir: Path) -> None:
        self.world, self.data_dir = world, data_dir
        self.node: HttpNode | None = None
        self.marks: dict[str, int] = {}
        """Room id -> how many of its events the reader had seen when the case began."""
        self.since: dict[str, str] = {}
        """Message id -> the bot's sync token before it was sent (a replay starts there)."""

    def start(self, **policy: Any) -> HttpNode:
        world = self.world
        config = matrix(world.homeserver, world.bot, **policy)
        self.node = open_node(self.data_dir, channels={self.channel: config})
        world.call(together(p.sync(0) for p in world.people.values()))
        for conversation, room in world.rooms.items():
            self.marks[room] = len(world.reader(conversation).events.get(room, []))
        return self.node

    def close(self) -> None:
        if self.node is not None:
            close_node(self.node)

    def user(self, person: str) -> str:
        return self.world.people[person].user_id

    def room(self, conversation: Conversation) -> str:
        """The conversation's room, opened (and joined by the bot and the members) on first
        use."""
        world = self.world
        if conversation not in world.rooms:
            opener, *others = (world.people[m] for m in conversation.members)

            async def open_room() -> str:
                invite = [world.bot, *(p.user_id for p in others)]
                room = await opener.room(invite, direct=conversation.direct)
                await opener.joined(room, world.bot)
                for person in others:
                    await person.client.join(room)
                    await opener.joined(room, person.user_id)
                return room

            world.rooms[conversation] = room = world.call(open_room())
            self.marks[room] = 0
        return world.rooms[conversation]

    def say(
        self,
        person: str,
        conversation: Conversation,
        text: str,
        *,
        mention: bool = False,
        thread: str | None = None,
    ) -> str:
        assert self.node is not None
        room = self.room(conversation)
        since = connector(self.node).since
        content: dict[str, Any] = {"m.mentions": {"user_ids": [self.world.bot]}} if mention else {}
        if thread is not None:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": thread}
        message_id = self.world.call(self.world.people[person].say(room, text, **content))
        if since is not None:
            self.since[message_id] = since
        return message_id

    def not_accepted(self, conversation: Conversation, message_id: str) -> str:
        """A Matrix sender is answered in the conversation (a direct message or a mention)."""
        return self.answer_containing(conversation, "Your message was not accepted")

    def deliver_again(self, conversation: Conversation, message_id: str) -> None:
        assert self.node is not None
        replay = replay_sync(connector(self.node), self.since[message_id])
        self.node.runtime.node.io.submit(replay).result(timeout=WAIT_S)

    def answers(self, conversation: Conversation, thread: str | None = None) -> list[str]:
        room = self.room(conversation)
        reader = self.world.reader(conversation)
        self.world.call(reader.sync())
        seen = reader.events.get(room, [])[self.marks[room] :]
        return [
            str(e["content"].get("body", ""))
            for e in seen
            if e.get("sender") == self.world.bot
            and e.get("type") == "m.room.message"
            and thread_of(e) == thread
        ]


def thread_of(event: dict[str, Any]) -> str | None:
    """The root of the thread a Matrix event is in (``m.thread`` relation), if any."""
    relates = event.get("content", {}).get("m.relates_to", {})
    return str(relates["event_id"]) if relates.get("rel_type") == "m.thread" else None


@pytest.fixture(scope="module")
def matrix_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MatrixWorld]:
    """One Synapse for the module, as tests/transports/channels_matrix has (start ~3 s)."""
    server = start_homeserver(tmp_path_factory.mktemp("synapse"))
    try:
        world = MatrixWorld(server)
        try:
            yield world
        finally:
            world.close()
    finally:
        server.stop()


class TestMatrixConnector(ConnectorConformance):
    @pytest.fixture
    def driver(
        self, matrix_world: MatrixWorld, data_dir: Path, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[ConnectorDriver]:
        monkeypatch.setenv(PASSWORD_ENV, matrix_world.password)
        driver = MatrixDriver(matrix_world, data_dir)
        try:
            yield driver
        finally:
            driver.close()


class TestTheSuiteCatchesABrokenConnector:
    """A webhook connector that gets translation wrong the way a new platform's might: each
    delivery handed in under an id of its own (a delivery id where the message's belongs), or
    every conversation taken for a direct one. The cases that hold those fail."""

    @pytest.fixture
    def driver(self, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ConnectorDriver]:
        with webhook_driver(data_dir, monkeypatch) as driver:
            yield driver

    def mistranslate(
        self, monkeypatch: pytest.MonkeyPatch, wrong: Callable[[InboundMessage], InboundMessage]
    ) -> None:
        parse = WebhookConnector.parse

        def parse_wrong(connector: WebhookConnector, body: bytes) -> InboundMessage:
            return wrong(parse(connector, body))

        monkeypatch.setattr(WebhookConnector, "parse", parse_wrong)

    def test_a_repeat_under_a_new_id_is_caught(
        self, driver: ConnectorDriver, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def delivery_id(message: InboundMessage) -> InboundMessage:
            return replace(message, message_id=f"{message.message_id}-{secrets.token_hex(3)}")

        self.mistranslate(monkeypatch, delivery_id)
        with pytest.raises(AssertionError):
            ConnectorConformance().test_a_message_delivered_twice_starts_one_run(driver)

    def test_a_group_taken_for_a_direct_chat_is_caught(
        self, driver: ConnectorDriver, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.mistranslate(monkeypatch, lambda message: replace(message, is_direct=True))
        with pytest.raises(AssertionError):
            ConnectorConformance().test_in_a_group_with_require_mention_only_a_mention_starts_a_run(
                driver
            )


def test_every_connector_kind_has_a_conformance_class() -> None:
    tested = {"webhook": TestWebhookConnector, "matrix": TestMatrixConnector}
    assert set(CONNECTORS) == set(tested)
    assert set(ConnectorConformance.__subclasses__()) == set(tested.values())
