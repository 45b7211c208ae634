"""Who starts runs, cell by cell: ``dm_policy`` x ``group_policy`` (unset or set) x a paired,
an unpaired and a listed sender x a direct and a group message, each sent to a real node, with
the expected outcome read from docs/channels.md's two tables (so the docs say what is tested).

The paired sender paired through the real path (a minted code, ``pair CODE``, an operator's
approval) on a node that had pairing on; each configuration then opens a copy of that data dir,
as an operator who changes the config of a channel would."""

from __future__ import annotations

import itertools
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from actors.channels.router import PAIRING_REQUIRED_REPLY
from events.catalog import ChannelMessageRefused
from tests.transports.channels.kit import (
    SECRET,
    SECRET_ENV,
    HttpNode,
    Receiver,
    channel,
    channel_node,
    close_node,
    decision,
    events_of,
    message,
    run_of,
)
from tests.transports.http.httpkit import eventually
from tests.transports.records import Records

DOC = Path(__file__).resolve().parents[3] / "docs" / "channels.md"
SENDERS = {
    "paired": "@alice:localhost",
    "unpaired": "@mallory:localhost",
    "listed": "@carol:localhost",
}
DM_POLICIES = ("deny", "pairing", "allow")
GROUP_POLICIES = (None, "pairing", "open", "disabled")


def documented(policy: str) -> dict[str, dict[str, str]]:
    """The table of docs/channels.md whose first header cell is ``policy``: value ->
    {sender kind -> "run" or the refusal reason}, plus the words after it ("told how to
    pair", "silent") under "<kind>+"."""
    text = DOC.read_text()
    rows = re.findall(rf"^\| `{policy}` \|.*$\n\|[-|]+\|\n((?:\|.*\|\n)+)", text, re.MULTILINE)
    assert len(rows) == 1, f"docs/channels.md has no single `{policy}` table"
    table: dict[str, dict[str, str]] = {}
    for line in rows[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        value = re.match(r"`([a-z_]+)`", cells[0])
        assert value is not None, line
        outcomes: dict[str, str] = {}
        for kind, cell in zip(SENDERS, cells[1:], strict=True):
            head, _, rest = cell.partition(",")
            outcomes[kind] = head.strip().strip("`")
            outcomes[f"{kind}+"] = rest.strip()
        table[value.group(1)] = outcomes
    return table


DIRECT = documented("dm_policy")
GROUP = documented("group_policy")


def test_the_tables_cover_every_value() -> None:
    assert set(DIRECT) == set(DM_POLICIES)
    assert set(GROUP) == {g for g in GROUP_POLICIES if g is not None}


@pytest.fixture(scope="module")
def paired_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir where ``@alice:localhost`` paired with the channel ``hook``."""
    data_dir = tmp_path_factory.mktemp("paired") / "data"
    data_dir.mkdir()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, SECRET)
        node = channel_node(data_dir, {"hook": channel(dm_policy="pairing")})
        try:
            code = node.call("POST", "/v1/channels/hook/pair-codes", {}).json()["code"]
            pair = message(f"pair {code}", sender=SENDERS["paired"], is_direct=True)
            assert decision(node, "hook", pair)["route"] == "pairing"
            (pending,) = eventually(
                lambda: node.call("GET", "/v1/approvals?state=pending").json()["items"]
            )
            path = f"/v1/approvals/{pending['approval_id']}"
            assert node.call("POST", path, {"decision": "allow"}).status == 200
            assert eventually(lambda: node.call("GET", "/v1/channels").json()["items"][0]["paired"])
        finally:
            close_node(node)
    return data_dir


def send(node: HttpNode, name: str, kind: str, direct: bool) -> tuple[dict[str, Any], str, str]:
    """The decision on a message from a ``kind`` sender, its id and its text."""
    text = "hello" if direct else "reel, hello"
    body = message(
        text,
        mid=f"{name}-{kind}-{'direct' if direct else 'group'}",
        sender=SENDERS[kind],
        is_direct=direct,
        conversation=f"dm-{kind}" if direct else "team-room",
    )
    return decision(node, name, body), body["message_id"], text


@pytest.mark.parametrize(
    ("dm_policy", "group_policy"),
    list(itertools.product(DM_POLICIES, GROUP_POLICIES)),
    ids=[f"dm={d}-group={g or 'unset'}" for d, g in itertools.product(DM_POLICIES, GROUP_POLICIES)],
)
def test_every_cell(
    paired_dir: Path,
    tmp_path: Path,
    receiver: Receiver,
    log: Records,
    dm_policy: str,
    group_policy: str | None,
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(paired_dir, data_dir)
    policy: dict[str, Any] = {
        "dm_policy": dm_policy,
        "mention_patterns": ("^reel[,:]",),
        "broadcast": "mention_only",
    }
    if group_policy is not None:
        policy["group_policy"] = group_policy
    effective = group_policy or ("pairing" if dm_policy == "pairing" else "open")
    node = channel_node(
        data_dir,
        {
            "hook": channel(receiver, **policy),
            # the listed sender on a channel that lists it (a list refuses everyone else first)
            "listed": channel(receiver, allow_from=(SENDERS["listed"],), **policy),
        },
    )
    try:
        listed = node.call("GET", "/v1/channels").json()["items"]
        assert {c["name"]: c["group_policy"] for c in listed} == {
            "hook": effective,
            "listed": effective,
        }
        started: dict[str, tuple[str, str]] = {}  # message id -> (run id, its text)
        refused: dict[str, str] = {}  # message id -> what the sender is told ("" or the words)
        for kind, direct in itertools.product(SENDERS, (True, False)):
            name = "listed" if kind == "listed" else "hook"
            cell = DIRECT[dm_policy] if direct else GROUP[effective]
            result, message_id, text = send(node, name, kind, direct)
            where = (kind, "direct" if direct else "group", result)
            principal = f"channel:{name}:{SENDERS[kind]}"
            if cell[kind] == "run":
                assert result["accepted"] and result["run_id"], where
                assert result["principal"] == principal
                started[message_id] = (result["run_id"], text)
                continue
            assert not result["accepted"] and result["run_id"] is None, where
            assert result["reason"] == cell[kind], where
            refusals = events_of(node, ChannelMessageRefused, f"channel/{name}")
            (recorded,) = [e for e in refusals if e.message_id == message_id]
            assert recorded.principal == principal and recorded.reason == cell[kind]
            refused[message_id] = cell[f"{kind}+"]
        for run_id, _ in started.values():
            assert run_of(node, run_id)["state"] == "done"
        told = [m for m, words in refused.items() if words == "told how to pair"]
        receiver.wait(len(started) + len(told))  # the answers, and the notices owed

        def heard(message_id: str) -> list[str]:
            return [
                r.body["text"] for r in receiver.received if r.body["in_reply_to"] == message_id
            ]

        for message_id, words in refused.items():
            assert words in ("told how to pair", "silent", ""), words
            expected = [PAIRING_REQUIRED_REPLY] if words == "told how to pair" else []
            assert heard(message_id) == expected, (message_id, words)
        for message_id, (_, text) in started.items():
            assert heard(message_id) == [text]
    finally:
        close_node(node)
    assert not log.faults(), log.text()
