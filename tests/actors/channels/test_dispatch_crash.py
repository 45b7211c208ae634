"""``kill -9`` of a real ``reel node`` while accepted messages wait in a coalescing window: the
next start answers them, once, in one run, and the journal verifies (docs/channels.md, "Nothing
lost across a stop")."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import urllib.error
from pathlib import Path

from tests.transports.channels.kit import SECRET, SECRET_ENV, Receiver
from tests.transports.node.test_daemon import reel
from tests.transports.test_node_process import ServingNode


def config_toml(receiver: Receiver) -> str:
    return f"""
[channels.hook]
kind = "webhook"
secret_env = "{SECRET_ENV}"
outbound_url = "{receiver.url}"
dm_policy = "allow"
coalesce_ms = 60000
"""


def kinds(data_dir: Path, kind: str) -> int:
    """How many committed events of ``kind`` the journal holds (read beside the node)."""
    with sqlite3.connect(f"file:{data_dir / 'journal.db'}?mode=ro", uri=True) as db:
        (count,) = db.execute("SELECT count(*) FROM events WHERE kind = ?", (kind,)).fetchone()
    return int(count)


def test_messages_in_a_coalescing_window_survive_a_kill_9(
    data_dir: Path, receiver: Receiver
) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "config.toml").write_text(config_toml(receiver))
    env = {SECRET_ENV: SECRET}
    node = ServingNode(data_dir, env)
    try:

        def send(text: str, mid: str) -> None:
            body = {"message_id": mid, "conversation": "dm-alice", "sender": "@alice:x"}
            body |= {"text": text, "is_direct": True}  # type: ignore[dict-item]
            # the answer waits for the 60 s window: the kill cuts it short
            with contextlib.suppress(urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                node.http("POST", "/v1/channels/hook/messages", body)

        for text, mid in (("first before the crash", "$k-1"), ("second before it", "$k-2")):
            threading.Thread(target=send, args=(text, mid), daemon=True).start()
            node.wait_until(lambda m=mid: kinds(data_dir, "channel.message_routed") >= int(m[-1]))
        assert kinds(data_dir, "channel.run_requested") == 0  # still held
    finally:
        node.kill()  # SIGKILL: no drain, no stop, nothing saved on the way out
    node = ServingNode(data_dir, env)
    try:
        answer = receiver.wait_for("first before the crash", timeout=30)
        assert "second before it" in answer.body["text"]
        assert answer.body["in_reply_to"] == "$k-1"
        status, runs = node.http("GET", "/v1/runs")
        assert status == 200 and len(runs["items"]) == 1
    finally:
        node.kill()
    assert len(receiver.received) == 1
    verified = reel("journal", "verify", "--data", str(data_dir))
    assert verified.returncode == 0, verified.stderr
