"""Pairing gates group rooms too, on a real Synapse with the example config of docs/channels.md
(``dm_policy = "pairing"``, ``mention_patterns = ["^reel[,:]"]``, ``broadcast =
"mention_only"``): a person nobody paired writes ``reel, ...`` in a group room with the bot and
starts nothing, and the room hears nothing of it; a paired person's run in the same room asks
before ``fs.read`` (a sender holds no role) and, denied, reads nothing into the room."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.actors.channels.test_sender_tools import SECRET_PLAN, workspace
from tests.transports.channels_matrix.kit import Person, run, settled
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.channels_matrix.test_matrix_connector import (
    make_bot,
    matrix,
    refused,
    start,
)
from tests.transports.http.httpkit import HttpNode, close_node, eventually

READ_NOTES = 'reel, what is in the notes?\n/tool fs.read {"path": "notes.txt"}'


def pending(node: HttpNode, subject: str) -> str | None:
    """The pending approval of ``subject`` (``tool`` or ``pairing``), if any."""
    page = node.call("GET", "/v1/approvals?state=pending").json()["items"]
    found = [a["approval_id"] for a in page if a["subject"] == subject]
    return str(found[0]) if found else None


def decide(node: HttpNode, approval_id: str, decision: str) -> None:
    reply = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": decision})
    assert reply.status == 200, reply.body


def test_an_unpaired_person_in_a_group_room_starts_nothing(
    homeserver: Homeserver, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = make_bot(homeserver, monkeypatch)
    dana, mallory = Person(homeserver, "dana"), Person(homeserver, "mallory")
    workspace(data_dir)
    config = matrix(
        homeserver,
        bot,
        dm_policy="pairing",
        mention_patterns=("^reel[,:]",),
        broadcast="mention_only",
        rate_burst=20,
    )
    node = start(data_dir, config)
    said: dict[str, Any] = {}

    async def scenario() -> None:
        async with dana, mallory:
            direct = await dana.room([bot], direct=True)
            await dana.joined(direct, bot)
            minted = await asyncio.to_thread(node.call, "POST", "/v1/channels/mx/pair-codes", {})
            await dana.say(direct, f"pair {minted.json()['code']}")
            await dana.reply_containing(direct, bot, "Pairing requested")
            pairing = await asyncio.to_thread(eventually, lambda: pending(node, "pairing"))
            await asyncio.to_thread(decide, node, pairing, "allow")
            await dana.reply_containing(direct, bot, "Pairing approved")

            said["room"] = room = await dana.room([bot, mallory.user_id])
            await dana.joined(room, bot)
            await mallory.client.join(room)
            await dana.joined(room, mallory.user_id)
            said["mallory"] = await mallory.say(room, READ_NOTES)
            await settled(
                lambda: refused(node).get(said["mallory"]) == "pairing_required",
                "mallory's message refused",
            )
            said["dana"] = await dana.say(room, READ_NOTES)
            prompt = await dana.reply_containing(room, bot, "Waiting for approval")
            assert "fs.read" in prompt["content"]["body"]
            approval = await asyncio.to_thread(eventually, lambda: pending(node, "tool"))
            await asyncio.to_thread(decide, node, approval, "deny")
            await dana.reply_containing(room, bot, "fs.read ->")
            said["bot"] = dana.said_by(room, bot)
            await mallory.sync()
            said["mallory_saw"] = [e for e in mallory.events.get(room, []) if e["sender"] == bot]

    try:
        run(scenario())
        mallory_id = f"channel:mx:{mallory.user_id}"
        runs = node.call("GET", "/v1/runs").json()["items"]
        assert mallory_id not in {r["principal"] for r in runs}  # nothing was started
        assert {r["principal"] for r in runs} == {f"channel:mx:{dana.user_id}"}
        # in the room, the bot said two things, both to dana, and never the workspace's text
        answered = [e["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] for e in said["bot"]]
        assert answered == [said["dana"], said["dana"]]
        bodies = [str(e["content"].get("body", "")) for e in said["bot"] + said["mallory_saw"]]
        assert all(SECRET_PLAN not in body for body in bodies)
    finally:
        close_node(node)
