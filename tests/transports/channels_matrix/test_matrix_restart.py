"""A restarted node answers what was said to it while it was stopped, once: the connector saves
its sync token (``channel.cursor_saved``) and resumes from it. A real Synapse, a real ``reel
node`` process stopped and started again on the same data dir."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
from pathlib import Path

from tests.transports.channels_matrix.kit import Person, run, unique
from tests.transports.channels_matrix.synapse import Homeserver
from tests.transports.node.test_daemon import reel
from tests.transports.test_node_process import PORTS, ServingNode

PASSWORD_ENV = "REEL_TEST_MATRIX_BOT_PASSWORD"


def config_toml(homeserver: Homeserver, bot: str) -> str:
    return f"""
[channels.mx]
kind = "matrix"
homeserver = "{homeserver.base_url}"
user_id = "{bot}"
password_env = "{PASSWORD_ENV}"
allow_rooms = ["*"]
dm_policy = "allow"
"""


def stop(node: ServingNode) -> None:
    node.process.send_signal(signal.SIGTERM)
    assert node.finish() == 0


def test_a_message_sent_while_the_node_was_stopped_is_answered_once(
    homeserver: Homeserver, data_dir: Path
) -> None:
    password = secrets.token_hex(16)
    bot = homeserver.register(unique("reelbot"), password)
    person = Person(homeserver, "erin")
    (data_dir / "config.toml").write_text(config_toml(homeserver, bot))
    env = {**PORTS, PASSWORD_ENV: password}
    room: dict[str, str] = {}

    async def before() -> None:
        room["id"] = await person.room([bot], direct=True)
        await person.joined(room["id"], bot)
        await person.say(room["id"], "first question")
        await person.reply_containing(room["id"], bot, "first question")

    async def after() -> None:
        await person.reply_containing(room["id"], bot, "asked while you slept")
        await asyncio.sleep(2.0)  # time for a second answer, were one coming
        await person.sync()

    async def with_person() -> None:
        async with person:
            node = await asyncio.to_thread(ServingNode, data_dir, env)
            try:
                await before()
                await asyncio.to_thread(stop, node)
            finally:
                node.kill()
            await person.say(room["id"], "asked while you slept")
            node = await asyncio.to_thread(ServingNode, data_dir, env)
            try:
                await after()
                await asyncio.to_thread(stop, node)
            finally:
                node.kill()

    run(with_person(), 120)
    answers = person.texts_from(room["id"], bot)
    assert len([a for a in answers if "asked while you slept" in a]) == 1, answers
    assert len([a for a in answers if "first question" in a]) == 1, answers

    # the journal: each message routed once, and the cursor saved (never redacted)
    done = reel("journal", "export", "--data", str(data_dir))
    assert done.returncode == 0, done
    events = [json.loads(line) for line in done.stdout.splitlines()]
    events = [e for e in events if e["record"] == "event"]
    routed = [e["event"]["message_id"] for e in events if e["kind"] == "channel.message_routed"]
    assert len(routed) == len(set(routed)) == 2
    cursors = [e["event"]["cursor"] for e in events if e["kind"] == "channel.cursor_saved"]
    assert cursors and all("[REDACTED" not in c for c in cursors)
