"""The whole way, as people meet it: a real Synapse, a real ``reel node`` process, a person in a
Matrix client. They DM the bot and are asked to pair; the operator mints a code with the CLI;
they send ``pair CODE``; the operator approves the pairing with the CLI; they ask for a shell
command that needs an approval, approve it from the chat with ``!reel approve``, and get the
answer. The journal then says who did what: the person's channel principal started the run and
decided the approval."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from tests.transports.channels_matrix.kit import Person, run, unique
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.node.test_daemon import reel
from tests.transports.test_node_process import PORTS, ServingNode

PASSWORD_ENV = "REEL_TEST_MATRIX_BOT_PASSWORD"
SHELL = 'say hi please\n/tool shell.run {"argv": ["echo", "hi"]}'
TEST_BOUND_S = 60.0
"""The scenario's bound once the node is up (each message takes ~70 ms; the test ~10 s)."""


def config_toml(homeserver: Homeserver, bot: str) -> str:
    return f"""
[tools]
shell_allowlist = ["echo"]

[channels.mx]
kind = "matrix"
homeserver = "{homeserver.base_url}"
user_id = "{bot}"
password_env = "{PASSWORD_ENV}"
allow_rooms = ["*"]
dm_policy = "pairing"
"""


def approver_policy(principal: str) -> str:
    """The operator lets the paired person decide approvals from the chat."""
    return f"""
@id("matrix-approver")
permit (principal == Principal::"{principal}", action == Action::"approval.resolve", resource);
"""


def test_pair_then_approve_a_tool_call_from_the_chat(
    homeserver: Homeserver, data_dir: Path
) -> None:
    password = secrets.token_hex(16)
    bot = homeserver.register(unique("reelbot"), password)
    person = Person(homeserver, "dana")
    principal = f"channel:mx:{person.user_id}"
    (data_dir / "config.toml").write_text(config_toml(homeserver, bot))
    (data_dir / "policies").mkdir()
    (data_dir / "policies" / "chat.cedar").write_text(approver_policy(principal))
    began = time.monotonic()
    node = ServingNode(data_dir, {**PORTS, PASSWORD_ENV: password})
    seen: dict[str, Any] = {}

    def operator(*args: str) -> str:
        """A ``reel`` command as the operator types it (on this node's API port)."""
        port = node.base.rpartition(":")[2]
        done = reel(*args, "--data", str(data_dir), env={"REEL_HTTP_PORT": port})
        assert done.returncode == 0, done
        return done.stdout

    def pending_pairing() -> str | None:
        status, page = node.http("GET", "/v1/approvals?state=pending")
        assert status == 200, page
        pairings = [a for a in page["items"] if a["subject"] == "pairing"]
        return str(pairings[0]["approval_id"]) if pairings else None

    async def scenario() -> None:
        async with person:
            room = await person.room([bot], direct=True)
            await person.joined(room, bot)
            await person.say(room, "hello")
            await person.reply_containing(room, bot, "Ask its operator for a pairing code")

            minted = await asyncio.to_thread(operator, "channels", "pair-code", "--channel", "mx")
            code = minted.split()[-1]
            await person.say(room, f"pair {code}")
            await person.reply_containing(room, bot, "Pairing requested")
            pairing = await asyncio.to_thread(pending_pairing)
            assert pairing is not None
            await asyncio.to_thread(operator, "approvals", "approve", pairing)
            await person.reply_containing(room, bot, "Pairing approved")

            await person.say(room, SHELL)
            prompt = await person.reply_containing(room, bot, "!reel approve")
            match = re.search(r"!reel approve (\w+)", prompt["content"]["body"])
            assert match is not None and "shell.run" in prompt["content"]["body"]
            seen["approval"] = approval = match.group(1)
            await person.say(room, f"!reel approve {approval}")
            decided = await person.reply_containing(room, bot, f"Approval {approval} approved")
            assert decided["content"]["body"] == f"Approval {approval} approved by {principal}."
            answer = await person.reply_containing(room, bot, "shell.run ->")
            seen["answer"] = answer["content"]["body"]

    try:
        run(scenario(), TEST_BOUND_S)
        assert "hi" in seen["answer"].split("shell.run ->", 1)[1]
        status, approval = node.http("GET", f"/v1/approvals/{seen['approval']}")
        assert status == 200 and approval["decided_by"] == principal
        status, ran = node.http("GET", f"/v1/runs/{approval['run_id']}")
        assert status == 200 and ran["principal"] == principal and ran["state"] == "done"
        node.process.send_signal(signal.SIGTERM)
        assert node.finish() == 0  # drains, logs the bot out, signs a checkpoint
    finally:
        node.kill()
    assert time.monotonic() - began < 90

    # the journal, read back as an auditor would
    export = [json.loads(line) for line in operator("journal", "export").splitlines()]
    events = [r for r in export if r["record"] == "event"]
    (resolved,) = [
        e["event"]
        for e in events
        if e["kind"] == "tool.approval_resolved" and e["event"]["approval_id"] == seen["approval"]
    ]
    assert resolved["decided_by"] == principal and resolved["decision"] == "allow"
    (accepted,) = [
        e
        for e in events
        if e["kind"] == "run.accepted" and e["event"]["run_id"] == approval["run_id"]
    ]
    assert accepted["principal"] == principal and accepted["event"]["channel"] == "mx"
    (paired,) = [e["event"] for e in events if e["kind"] == "channel.pairing_resolved"]
    assert paired["principal"] == principal and paired["decided_by"] == "admin"
    assert reel("journal", "verify", "--data", str(data_dir)).returncode == 0
    # the bot's password reached neither the journal nor the log
    assert password.encode() not in (data_dir / "journal.db").read_bytes()
    assert not any(password in line for line in node.lines + node.stdout)
