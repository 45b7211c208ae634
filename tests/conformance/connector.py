"""The channel connector seam's conformance suite: what every connector must do the same way,
as people on its platform meet it, on a real node.

A connector only translates (docs/channels.md, "Writing a connector"): the router, pairing,
idempotency, commands and reply splitting live behind it, so one platform's people must see
exactly what another's see. Each case is written once against a :class:`ConnectorDriver`,
the platform's side of a conversation (send a message as a person, in a direct or a group
conversation; read what the bot said there), and run against every connector
(tests/conformance/test_connectors.py). The cases also read the node's journal, which is the
same for every connector.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.channels.pairing import REQUESTED_REPLY
from actors.channels.router import (
    PAIRING_INVALID_REPLY,
    PAIRING_REQUIRED_REPLY,
    RATE_LIMITED_REPLY,
)
from events.catalog import (
    ChannelCommandHandled,
    ChannelMessageRefused,
    ChannelMessageRouted,
    ChannelRunRequested,
    Event,
)
from tests.transports.channels.kit import events_of, hub_of
from tests.transports.http.httpkit import HttpNode, eventually

WAIT_S = 20.0
"""The longest a case waits for one thing (an answer takes well under a second)."""


@dataclass(frozen=True)
class Conversation:
    """A conversation on the platform: ``name`` is the case's handle for it (a driver maps it
    to the platform's own id, a room, a chat), ``members`` the people in it (the first
    opens it)."""

    name: str
    direct: bool
    members: tuple[str, ...]


DM_ALICE = Conversation("dm-alice", direct=True, members=("alice",))
DM_MALLORY = Conversation("dm-mallory", direct=True, members=("mallory",))
GROUP = Conversation("group", direct=False, members=("alice", "bob"))


class ConnectorDriver(abc.ABC):
    """The platform's side of one connector: the people (``alice``, ``bob``, ``mallory``), the
    conversations they have with the bot, and a node whose channel :attr:`channel` uses the
    connector. A driver drives the platform as its people do: it never hands a message to the
    hub itself."""

    channel: str
    """The channel's name in the node's config."""
    data_dir: Path
    """The node's data dir (its ``workspace/`` is what the agent's tools see)."""

    @abc.abstractmethod
    def start(self, **policy: Any) -> HttpNode:
        """A node whose one channel uses this connector with the router ``policy`` (keys of
        ``[channels.<name>]``); the driver stops it after the case."""

    @abc.abstractmethod
    def user(self, person: str) -> str:
        """The platform's id of ``person`` (what ``allow_from`` and ``deny_from`` list)."""

    @abc.abstractmethod
    def say(
        self,
        person: str,
        conversation: Conversation,
        text: str,
        *,
        mention: bool = False,
        thread: str | None = None,
    ) -> str:
        """``person`` says ``text`` in ``conversation`` (mentioning the bot, the platform's
        way, when ``mention``; in the thread whose root is message ``thread``, when given);
        the platform's id of the message."""

    @abc.abstractmethod
    def not_accepted(self, conversation: Conversation, message_id: str) -> str:
        """What the platform was told of message ``message_id``, which the node did not take
        (bad input): how a sender or caller learns it is up to the platform."""

    @abc.abstractmethod
    def deliver_again(self, conversation: Conversation, message_id: str) -> None:
        """The platform delivers message ``message_id`` a second time (a webhook retry, a sync
        replayed after a reconnect)."""

    @abc.abstractmethod
    def answers(self, conversation: Conversation, thread: str | None = None) -> list[str]:
        """What the bot has said in ``conversation`` during this case, in order (after
        catching up with the platform): outside threads, or in the thread whose root is
        message ``thread``."""

    def wait_answers(
        self,
        conversation: Conversation,
        done: Callable[[list[str]], bool],
        what: str,
        thread: str | None = None,
    ) -> list[str]:
        """:meth:`answers` once ``done`` holds of them; fail naming ``what`` after
        :data:`WAIT_S`."""

        def check() -> list[str] | None:
            said = self.answers(conversation, thread)
            return said if done(said) else None

        found = eventually(check, WAIT_S)
        said = self.answers(conversation, thread)
        assert found is not None, f"never: {what}; the bot said {said}"
        return list(found)

    def answer_containing(
        self, conversation: Conversation, needle: str, thread: str | None = None
    ) -> str:
        """The first thing the bot said in ``conversation`` (``thread``) that holds
        ``needle``."""
        said = self.wait_answers(
            conversation,
            lambda s: any(needle in t for t in s),
            f"an answer holding {needle!r}",
            thread,
        )
        return next(t for t in said if needle in t)


class ConnectorConformance:
    """Subclass per connector, with a ``driver`` fixture giving its :class:`ConnectorDriver`."""

    def principal(self, driver: ConnectorDriver, person: str) -> str:
        return f"channel:{driver.channel}:{driver.user(person)}"

    def stream(self, driver: ConnectorDriver) -> str:
        return f"channel/{driver.channel}"

    def recorded(self, node: HttpNode, driver: ConnectorDriver, cls: type[Any]) -> list[Any]:
        found: list[Event] = events_of(node, cls, self.stream(driver))
        return found

    def refusal(self, node: HttpNode, driver: ConnectorDriver, message_id: str) -> str:
        """The recorded reason ``message_id`` was refused, once it is recorded."""

        def reason() -> str:
            for event in self.recorded(node, driver, ChannelMessageRefused):
                if event.message_id == message_id:
                    return str(event.reason)
            return ""

        found = eventually(reason, WAIT_S)
        assert found, f"{message_id} was never refused"
        return str(found)

    def run_principals(self, node: HttpNode) -> list[str]:
        reply = node.call("GET", "/v1/runs")
        assert reply.status == 200, reply.body
        return [str(r["principal"]) for r in reply.json()["items"]]

    def test_an_allowed_sender_starts_a_run_answered_in_the_same_conversation(
        self, driver: ConnectorDriver
    ) -> None:
        node = driver.start(dm_policy="allow")
        asked = driver.say("alice", DM_ALICE, "hello there")
        answer = driver.answer_containing(DM_ALICE, "hello there")
        (routed,) = self.recorded(node, driver, ChannelMessageRouted)
        assert routed.message_id == asked and routed.route == "run" and routed.is_direct
        assert self.run_principals(node) == [self.principal(driver, "alice")]
        assert driver.answers(DM_ALICE) == [answer]

    def test_a_message_delivered_twice_starts_one_run(self, driver: ConnectorDriver) -> None:
        node = driver.start(dm_policy="allow")
        asked = driver.say("alice", DM_ALICE, "only once please")
        driver.answer_containing(DM_ALICE, "only once please")
        driver.deliver_again(DM_ALICE, asked)
        hub = hub_of(node.runtime)
        assert eventually(lambda: hub.duplicates >= 1, WAIT_S), "the repeat never reached the hub"
        assert hub.duplicates == 1
        assert [m.message_id for m in self.recorded(node, driver, ChannelMessageRouted)] == [asked]
        (requested,) = self.recorded(node, driver, ChannelRunRequested)
        assert requested.message_ids == (asked,)
        assert len(self.run_principals(node)) == 1
        assert driver.answers(DM_ALICE) == ["only once please"]

    def test_a_denied_sender_is_refused_and_nothing_runs(self, driver: ConnectorDriver) -> None:
        node = driver.start(dm_policy="allow", deny_from=(driver.user("mallory"),))
        refused = driver.say("mallory", DM_MALLORY, "let me in")
        assert self.refusal(node, driver, refused) == "sender_denied"
        # alice is answered after mallory was refused: by then mallory would have heard
        driver.say("alice", DM_ALICE, "and me?")
        driver.answer_containing(DM_ALICE, "and me?")
        assert self.run_principals(node) == [self.principal(driver, "alice")]
        assert driver.answers(DM_MALLORY) == []

    def test_in_a_group_with_require_mention_only_a_mention_starts_a_run(
        self, driver: ConnectorDriver
    ) -> None:
        node = driver.start(require_mention=True, broadcast="mention_only")
        plain = driver.say("alice", GROUP, "just chatting among humans")
        assert self.refusal(node, driver, plain) == "mention_required"
        asked = driver.say("alice", GROUP, "what is the time?", mention=True)
        answer = driver.answer_containing(GROUP, "what is the time?")
        (routed,) = self.recorded(node, driver, ChannelMessageRouted)
        assert routed.message_id == asked and routed.mentioned and not routed.is_direct
        assert self.run_principals(node) == [self.principal(driver, "alice")]
        assert driver.answers(GROUP) == [answer]  # the unmentioned message heard nothing

    def test_an_unpaired_sender_pairs_with_a_code_then_runs(self, driver: ConnectorDriver) -> None:
        node = driver.start(dm_policy="pairing")
        first = driver.say("alice", DM_ALICE, "hello")
        assert self.refusal(node, driver, first) == "pairing_required"
        told = driver.wait_answers(DM_ALICE, bool, "the unpaired sender told how to pair")
        assert told == [PAIRING_REQUIRED_REPLY]
        driver.say("alice", DM_ALICE, "pair 0000-0000")
        driver.answer_containing(DM_ALICE, PAIRING_INVALID_REPLY)
        minted = node.call("POST", f"/v1/channels/{driver.channel}/pair-codes", {})
        assert minted.status == 201, minted.body
        driver.say("alice", DM_ALICE, f"pair {minted.json()['code']}")
        driver.answer_containing(DM_ALICE, REQUESTED_REPLY)
        pairing = eventually(lambda: pending(node, "pairing"), WAIT_S)
        assert pairing, "no pairing waits for a decision"
        decided = node.call("POST", f"/v1/approvals/{pairing}", {"decision": "allow"})
        assert decided.status == 200, decided.body
        driver.answer_containing(DM_ALICE, "Pairing approved")
        assert self.run_principals(node) == []
        driver.say("alice", DM_ALICE, "now we can talk")
        driver.answer_containing(DM_ALICE, "now we can talk")
        assert self.run_principals(node) == [self.principal(driver, "alice")]

    def test_a_message_over_the_size_cap_is_not_taken_and_the_platform_hears_why(
        self, driver: ConnectorDriver
    ) -> None:
        node = driver.start(dm_policy="allow", max_message_bytes=64)
        too_long = driver.say("alice", DM_ALICE, "x" * 100)
        heard = driver.not_accepted(DM_ALICE, too_long)
        assert "text: the message is 100 bytes; the limit is 64" in heard
        short = driver.say("alice", DM_ALICE, "short")
        driver.answer_containing(DM_ALICE, "short")
        assert [m.message_id for m in self.recorded(node, driver, ChannelMessageRouted)] == [short]
        assert self.recorded(node, driver, ChannelMessageRefused) == []
        assert self.run_principals(node) == [self.principal(driver, "alice")]

    def test_a_long_answer_arrives_in_parts_that_join_to_the_whole(
        self, driver: ConnectorDriver
    ) -> None:
        driver.start(dm_policy="allow", reply_max_chars=40)
        words = " ".join(f"word{i}" for i in range(20))  # 139 characters: 4 parts of <= 40
        driver.say("alice", DM_ALICE, words)
        parts = driver.wait_answers(
            DM_ALICE, lambda said: " ".join(said).endswith("word19"), "the last part"
        )
        assert all(len(part) <= 40 for part in parts)
        assert len(parts) == 4 and " ".join(parts) == words

    def test_a_status_command_is_answered(self, driver: ConnectorDriver) -> None:
        node = driver.start(dm_policy="allow")
        driver.say("alice", DM_ALICE, "!reel status")
        assert driver.answer_containing(DM_ALICE, "no session yet")
        driver.say("alice", DM_ALICE, "hello")
        driver.answer_containing(DM_ALICE, "hello")
        (run,) = node.call("GET", "/v1/runs").json()["items"]
        driver.say("alice", DM_ALICE, "!reel status")
        status = driver.answer_containing(DM_ALICE, "1 run(s)")
        assert f"the last, {run['run_id']}, is done" in status

        def handled() -> list[tuple[str, str]]:
            return [
                (h.command, h.outcome) for h in self.recorded(node, driver, ChannelCommandHandled)
            ]

        expected = [("status", "failed"), ("status", "done")]  # no session yet, then one
        assert eventually(lambda: handled() == expected, WAIT_S), handled()
        assert self.run_principals(node) == [self.principal(driver, "alice")]

    def test_a_sender_who_floods_is_told_to_wait_and_starts_nothing_more(
        self, driver: ConnectorDriver
    ) -> None:
        node = driver.start(dm_policy="allow", rate_burst=1, rate_limit_per_minute=1)
        driver.say("alice", DM_ALICE, "first")
        flooded = driver.say("alice", DM_ALICE, "second")
        assert self.refusal(node, driver, flooded) == "rate_limited"
        driver.answer_containing(DM_ALICE, RATE_LIMITED_REPLY)
        driver.answer_containing(DM_ALICE, "first")
        assert self.run_principals(node) == [self.principal(driver, "alice")]
        assert sorted(driver.answers(DM_ALICE)) == sorted(["first", RATE_LIMITED_REPLY])

    def test_an_answer_goes_into_the_thread_of_the_message(self, driver: ConnectorDriver) -> None:
        node = driver.start(dm_policy="allow")
        root = driver.say("alice", DM_ALICE, "a thread starts here")
        driver.answer_containing(DM_ALICE, "a thread starts here")
        asked = driver.say("alice", DM_ALICE, "a question in the thread", thread=root)
        driver.answer_containing(DM_ALICE, "a question in the thread", thread=root)
        assert driver.answers(DM_ALICE) == ["a thread starts here"]
        routed = {m.message_id: m.thread for m in self.recorded(node, driver, ChannelMessageRouted)}
        assert routed == {root: None, asked: root}

    def test_a_senders_tool_call_is_asked_about_in_the_conversation(
        self, driver: ConnectorDriver
    ) -> None:
        node = driver.start(dm_policy="allow")
        (driver.data_dir / "workspace").mkdir(exist_ok=True)
        (driver.data_dir / "workspace" / "notes.txt").write_text("the blue widget")
        driver.say("alice", DM_ALICE, 'what is in the notes?\n/tool fs.read {"path": "notes.txt"}')
        approval = eventually(lambda: pending(node, "tool"), WAIT_S)
        assert approval, "the sender's fs.read did not wait for a human"
        prompt = driver.answer_containing(DM_ALICE, f"Waiting for approval {approval}")
        assert "fs.read" in prompt and "An operator of this node decides it." in prompt
        assert "the blue widget" not in " ".join(driver.answers(DM_ALICE))
        decided = node.call("POST", f"/v1/approvals/{approval}", {"decision": "allow"})
        assert decided.status == 200, decided.body
        assert "the blue widget" in driver.answer_containing(DM_ALICE, "fs.read ->")


def pending(node: HttpNode, subject: str) -> str | None:
    """The id of the approval of ``subject`` (``tool``, ``pairing``) waiting for an
    operator, if any."""
    page = node.call("GET", "/v1/approvals?state=pending").json()["items"]
    found = [a["approval_id"] for a in page if a["subject"] == subject]
    return str(found[0]) if found else None
