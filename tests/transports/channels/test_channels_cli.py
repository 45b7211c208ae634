"""``reel channels list | pair-code`` and ``reel approvals`` with pairing requests, as an operator
runs them: the ``reel`` executable against a running node's API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests import processes
from tests.transports.channels.kit import (
    SECRET,
    SECRET_ENV,
    channel,
    channel_node,
    close_node,
    decision,
    message,
)
from tests.transports.http.httpkit import eventually

REEL = str(Path(sys.executable).with_name("reel"))


def reel(*args: str, port: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, SECRET_ENV: SECRET}
    if port is not None:
        env["REEL_HTTP_PORT"] = str(port)
    return processes.run([REEL, *args], capture_output=True, text=True, timeout=60, env=env)


def test_an_operator_pairs_a_sender_from_the_command_line(data_dir: Path) -> None:
    node = channel_node(data_dir, {"hook": channel(dm_policy="pairing")})
    port = node.server.port
    data = str(data_dir)
    try:
        minted = reel(
            "channels", "pair-code", "--channel", "hook", "--ttl", "10m", "--data", data, port=port
        )
        assert minted.returncode == 0, minted.stderr
        code = minted.stdout.split()[-1]  # the code is the last word
        assert len(code) == 8 and "hook" in minted.stdout
        sender: dict[str, Any] = {"sender": "@alice:localhost", "is_direct": True}
        assert decision(node, "hook", message(f"pair {code}", **sender))["route"] == "pairing"
        listed = reel("approvals", "list", "--data", data, port=port)
        assert listed.returncode == 0, listed.stderr
        assert "device pairing: channel:hook:@alice:localhost on channel hook" in listed.stdout
        approval_id = listed.stdout.split()[0]
        approved = reel("approvals", "approve", approval_id, "--data", data, port=port)
        assert approved.returncode == 0, approved.stderr
        assert "allow by admin" in approved.stdout
        assert "channel:hook:@alice:localhost is paired with the channel" in approved.stdout
        assert decision(node, "hook", message("hello", **sender))["accepted"]
        channels = reel("channels", "list", "--data", data, port=port)
        assert channels.returncode == 0
        assert "hook  webhook  enabled  dm=pairing  group=pairing" in channels.stdout
        assert "paired=1  pending=0" in channels.stdout
        # a second request stays pending for the offline check below
        again = reel(
            "channels", "pair-code", "--channel", "hook", "--json", "--data", data, port=port
        )
        second = __import__("json").loads(again.stdout)["code"]
        bob: dict[str, Any] = {"sender": "@bob:localhost", "is_direct": True}
        assert decision(node, "hook", message(f"pair {second}", **bob))["accepted"]
        pending = eventually(
            lambda: [
                a
                for a in node.call("GET", "/v1/approvals?state=pending").json()["items"]
                if a["subject"] == "pairing"
            ]
        )
    finally:
        close_node(node)
    offline = reel("approvals", "approve", pending[0]["approval_id"], "--data", data)
    assert offline.returncode == 2
    assert "is a pairing request: it is decided on a running node" in offline.stderr
    assert len(offline.stderr.strip().splitlines()) == 1


def test_bad_input_is_one_line_and_exit_2(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text(
        f'[channels.hook]\nkind = "webhook"\nsecret_env = "{SECRET_ENV}"\ndm_policy = "allow"\n'
    )
    for ttl in ("5s", "3d", "soon"):
        bad = reel(
            "channels", "pair-code", "--channel", "hook", "--ttl", ttl, "--data", str(data_dir)
        )
        assert bad.returncode == 2 and "--ttl" in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    stopped = reel("channels", "pair-code", "--channel", "hook", "--data", str(data_dir))
    assert stopped.returncode == 2 and "running node" in stopped.stderr
    # with no node, list shows what config.toml declares
    listed = reel("channels", "list", "--data", str(data_dir))
    assert listed.returncode == 0
    assert listed.stdout.startswith("hook  webhook  enabled  dm=allow  group=open")
    (data_dir / "config.toml").write_text(
        '[channels.hook]\nkind = "webhook"\nbroadcast = "maybe"\n'
    )
    broken = reel("channels", "list", "--data", str(data_dir))
    assert broken.returncode == 2 and "channels.hook.broadcast" in broken.stderr
