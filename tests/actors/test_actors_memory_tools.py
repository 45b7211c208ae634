"""The memory tools on a real node with the deterministic provider: ``memory.write`` is governed
like any tool (asked for, approved, recorded as the run's principal in its session), and
``memory.search`` finds what that principal may see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.transports.http.httpkit import HttpNode, SseEvent, close_node
from tests.transports.http.test_http_memory import memory_node, token_for


@pytest.fixture
def node(data_dir: Path) -> Iterator[HttpNode]:
    running = memory_node(data_dir)
    try:
        yield running
    finally:
        close_node(running)


def as_(token: str) -> str:
    return f"Bearer {token}"


def start(node: HttpNode, token: str, session_id: str, text: str) -> str:
    reply = node.call(
        "POST", f"/v1/sessions/{session_id}/messages", {"text": text}, auth=as_(token)
    )
    assert reply.status == 202, reply
    run_id: str = reply.json()["run_id"]
    return run_id


def session_of(node: HttpNode, token: str) -> str:
    session_id: str = node.call("POST", "/v1/sessions", {}, auth=as_(token)).json()["session_id"]
    return session_id


def entries(events: list[SseEvent], kind: str) -> list[dict[str, Any]]:
    return [e.entry for e in events if e.event == kind]


def completed(events: list[SseEvent]) -> dict[str, Any]:
    (done,) = entries(events, "tool.completed")
    return done


def test_memory_write_asks_then_records_for_the_run(node: HttpNode) -> None:
    alice = token_for(node, "agent:alice", "agent")
    bob = token_for(node, "agent:bob", "agent")
    session = session_of(node, alice)
    write = (
        '/tool memory.write {"text": "Alice drinks green tea", "scope": "session", "tags": ["tea"]}'
    )
    run_id = start(node, alice, session, write)
    approval_id = node.pending_approval(run_id)  # sensitive: a human decides
    decided = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
    assert decided.status == 200, decided
    done = completed(node.finish(run_id))
    assert done["event"]["ok"], done
    item_id = json.loads(done["event"]["output"])["item_id"]

    item = node.call("GET", f"/v1/memory/{item_id}", auth=as_(alice)).json()
    assert (item["scope"], item["session_id"], item["written_by"], item["source"]) == (
        "session",
        session,
        "agent:alice",
        "learned",
    )
    (stored,) = node.runtime.journal.read_stream(f"memory/{item_id}")
    assert stored.principal == "agent:alice"
    assert stored.causation_id == done["stream"].removeprefix("tool/")  # caused by the call

    # Alice's next run in the session finds it, without asking anyone (a read).
    search = '/tool memory.search {"query": "green tea"}'
    events = node.finish(start(node, alice, session, search))
    assert entries(events, "tool.approval_requested") == []
    hits = json.loads(completed(events)["event"]["output"])["hits"]
    assert [h["item_id"] for h in hits] == [item_id]
    # Bob, in his own session, does not.
    events = node.finish(start(node, bob, session_of(node, bob), search))
    assert json.loads(completed(events)["event"]["output"])["hits"] == []


def test_a_denied_write_records_nothing(node: HttpNode) -> None:
    session = node.session()
    run_id = node.start('/tool memory.write {"text": "remember this", "scope": "global"}', session)
    approval_id = node.pending_approval(run_id)
    node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "deny"})
    done = completed(node.finish(run_id))
    assert not done["event"]["ok"]
    assert node.runtime.journal.events_of_kinds(("memory.item_written",)) == []


def test_a_write_that_cannot_happen_is_refused_before_anyone_is_asked(node: HttpNode) -> None:
    text = "x" * 8001
    run_id = node.start(f'/tool memory.write {{"text": "{text}"}}')
    events = node.finish(run_id)
    assert entries(events, "tool.approval_requested") == []
    assert "the cap is 8,000" in json.dumps([e.entry for e in events])
    assert node.runtime.journal.events_of_kinds(("memory.item_written",)) == []
