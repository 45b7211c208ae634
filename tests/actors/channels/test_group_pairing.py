"""Pairing gates every conversation: with the example config of docs/channels.md
(``dm_policy = "pairing"``, a mention pattern), a sender nobody paired who writes ``reel, ...``
in a group conversation starts nothing, hears nothing, and the refusal is recorded with its
principal. Through the real webhook path: a signed POST in, the signed replies out."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from events.catalog import ChannelMessageRefused, ChannelMessageRouted
from tests.actors.channels.test_sender_tools import SECRET_PLAN, workspace
from tests.transports.channels.kit import (
    Receiver,
    channel,
    channel_node,
    close_node,
    events_of,
    message,
    post_webhook,
    signature,
)
from tests.transports.http.httpkit import eventually
from tests.transports.records import Records

DOC = Path(__file__).resolve().parents[3] / "docs" / "channels.md"


def example() -> dict[str, Any]:
    """The router keys of the example ``[channels.hook]`` of docs/channels.md, as written
    there (its connector keys are this test's: the secret's variable, the receiver's URL)."""
    block = re.search(r"```toml\n(\[channels\.hook\].*?)```", DOC.read_text(), re.DOTALL)
    assert block is not None, "docs/channels.md has no [channels.hook] example"
    table: dict[str, Any] = tomllib.loads(block.group(1))["channels"]["hook"]
    for key in ("kind", "secret_env", "outbound_url"):
        del table[key]
    assert table["dm_policy"] == "pairing" and table["mention_patterns"] == ["^reel[,:]"]
    return {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}


READ_NOTES = 'reel, what is in the notes?\n/tool fs.read {"path": "notes.txt"}'


def test_an_unpaired_sender_in_a_group_starts_nothing_and_hears_nothing(
    data_dir: Path, receiver: Receiver, log: Records
) -> None:
    workspace(data_dir)
    node = channel_node(data_dir, {"hook": channel(receiver, **example())})
    try:
        body = message(READ_NOTES, sender="@mallory:localhost", conversation="team-room")
        raw = json.dumps(body).encode()
        reply = post_webhook(node, "hook", raw, signature(raw))
        assert reply.status == 200, reply.body
        decided = reply.json()
        assert decided["accepted"] is False and decided["run_id"] is None
        assert decided["reason"] == "pairing_required"
        assert SECRET_PLAN not in reply.body.decode()
        (refused,) = eventually(lambda: events_of(node, ChannelMessageRefused))
        assert refused.reason == "pairing_required"
        assert refused.principal == "channel:hook:@mallory:localhost"
        stored = node.runtime.journal.read_stream("channel/hook")
        assert [e.principal for e in stored] == ["channel:hook:@mallory:localhost"]
        assert events_of(node, ChannelMessageRouted) == []
        assert node.call("GET", "/v1/runs").json()["items"] == []
        # a message that goes out later would be the run's; nothing was started, so nothing
        # reaches the room (a direct message would have been told how to pair)
        assert receiver.texts() == []
    finally:
        close_node(node)
    assert not log.faults(), log.text()
