"""``POST /v1/sessions/{id}/compact``, ``GET .../checkpoints``, ``POST .../restore`` on a real
node with a small context budget: automatic and requested compaction, restore and the next
run's context, bad input naming its field, who may do what, and the documented shapes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events import JournalReader
from events.catalog import AccessDecided
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.config import ContextSection
from transports.http.openapi import document

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
CONTEXT = ContextSection(budget_tokens=600, compact_at=0.75, cooldown_s=3600.0)
"""Small: a few turns pass the threshold. One automatic compaction per hour, so what the
tests do after the first is not raced by the end of a run reaching its session late."""


@pytest.fixture
def node(data_dir: Path) -> Iterator[HttpNode]:
    running = open_node(data_dir, keepalive_s=0.3, context=CONTEXT)
    try:
        yield running
    finally:
        close_node(running)


def say(i: int) -> str:
    return f"Message {i} of a long conversation. " + " ".join(f"word{i}x{k}" for k in range(14))


def talk(node: HttpNode, session_id: str, text: str) -> tuple[str, list[Any]]:
    """Send a message and follow its run to the end: the run id and its SSE events."""
    run_id = node.start(text, session_id)
    return run_id, node.finish(run_id)


def context_of(events: list[Any]) -> dict[str, Any]:
    entries: list[dict[str, Any]] = [
        e.entry["event"] for e in events if e.event == "run.context_assembled"
    ]
    (entry,) = entries
    return entry


def call(node: HttpNode, method: str, path: str, body: Any = None, **kw: Any) -> Any:
    """The reply, checked against the OpenAPI document."""
    reply = node.call(method, path, body, **kw)
    check(document(), method, path, reply)
    return reply


def token(node: HttpNode, principal: str, role: str) -> str:
    made = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert made.status == 201, made.body
    return f"Bearer {made.json()['token']}"


def test_automatic_then_requested_then_restore_to_the_first(node: HttpNode) -> None:
    sid = node.session()
    runs = [talk(node, sid, say(i))[0] for i in range(10)]

    def first_checkpoint() -> Any:
        listing = call(node, "GET", f"/v1/sessions/{sid}/checkpoints").json()
        return listing if listing["items"] else None

    listing = eventually(first_checkpoint)
    assert listing, "no automatic compaction"
    (first,) = listing["items"]
    assert listing["in_force"] == first["checkpoint_id"] and first["in_force"] is True
    assert (first["trigger"], first["method"], first["principal"]) == ("auto", "extractive", "node")
    assert first["covers"] == runs[: len(first["covers"])]
    assert first["tokens_after"] < first["tokens_before"]

    runs += [talk(node, sid, say(i))[0] for i in range(10, 12)]
    compacted = call(node, "POST", f"/v1/sessions/{sid}/compact")
    assert compacted.status == 200
    assert compacted.headers["location"] == f"/v1/sessions/{sid}/checkpoints"
    outcome = compacted.json()
    assert (outcome["status"], outcome["method"]) == ("compacted", "extractive")
    assert outcome["covers"][: len(first["covers"])] == first["covers"]
    assert outcome["summary"].startswith("Earlier conversation, condensed")

    restored = call(
        node, "POST", f"/v1/sessions/{sid}/restore", {"checkpoint": first["checkpoint_id"]}
    )
    assert restored.status == 200
    after = restored.json()
    assert after["in_force"] == first["checkpoint_id"]
    assert [c["in_force"] for c in after["items"]] == [True, False]
    assert [c["checkpoint_id"] for c in after["items"]] == [
        first["checkpoint_id"],
        outcome["compaction_id"],
    ]

    follow, events = talk(node, sid, "what did we say?")
    context = context_of(events)
    assert context["compaction_id"] == first["checkpoint_id"]
    assert context["prior_runs"] == [
        r for r in runs[: first["history_runs"]] if r not in first["covers"]
    ]
    assert not set(context["prior_runs"]) & set(runs[first["history_runs"] :])
    # Later runs stay runs of the session: a restore is an event, never a deletion.
    listed = node.call("GET", f"/v1/sessions/{sid}/runs?limit=200").json()
    assert [r["run_id"] for r in listed["items"]] == [*runs, follow]

    reader = JournalReader.open(node.runtime.data_dir / "journal.db")
    try:
        rows = [r for r in reader.read_stream(f"session/{sid}") if r.kind.startswith("session.")]
        decided = [r.decode() for r in reader.events_of_kinds(("access.decided",))]
        actions = [(d.action, d.outcome) for d in decided if isinstance(d, AccessDecided)]
    finally:
        reader.close()
    assert [(r.kind, r.principal) for r in rows][-3:] == [
        ("session.compacted", "node"),
        ("session.compacted", "admin"),
        ("session.restored", "admin"),
    ]
    assert ("session.compact", "allow") in actions and ("session.restore", "allow") in actions


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"checkpoint": UNKNOWN}, "$.checkpoint"),
        ({"checkpoint": "nope"}, "$.checkpoint"),
        ({"checkpoint": 7}, "$.checkpoint"),
        ({}, "$.checkpoint"),
        ({"checkpoint": UNKNOWN, "extra": 1}, "$.extra"),
        (None, "$"),
    ],
)
def test_restore_bad_input_is_400_naming_the_field(node: HttpNode, body: Any, field: str) -> None:
    sid = node.session()
    talk(node, sid, "hello")
    reply = call(node, "POST", f"/v1/sessions/{sid}/restore", body)
    assert reply.status == 400, reply.body
    assert reply.error["code"] == "invalid_argument" and reply.error["field"] == field
    if body == {"checkpoint": UNKNOWN}:
        assert reply.error["message"] == (
            f"checkpoint: session {sid} has no checkpoint '{UNKNOWN}' (0 checkpoints)"
        )


def test_what_the_state_refuses_and_what_does_not_exist(node: HttpNode) -> None:
    sid = node.session()
    empty = call(node, "POST", f"/v1/sessions/{sid}/compact")
    assert empty.status == 409 and "no completed run left" in empty.error["message"]
    live = node.start("/sleep 20000", sid)
    node.until(live, "run.started")[0].close()
    busy = call(node, "POST", f"/v1/sessions/{sid}/compact", {})
    assert busy.status == 409 and "in progress or queued" in busy.error["message"]
    assert node.call("POST", f"/v1/runs/{live}/cancel").status == 202
    node.finish(live)
    assert call(node, "GET", f"/v1/sessions/{sid}/checkpoints").json() == {
        "session_id": sid,
        "in_force": None,
        "items": [],
    }
    for method, what in (("POST", "compact"), ("GET", "checkpoints"), ("POST", "restore")):
        body = {"checkpoint": UNKNOWN} if what == "restore" else None
        missing = call(node, method, f"/v1/sessions/{UNKNOWN}/{what}", body)
        assert missing.status == 404, what
    typo = node.call("POST", f"/v1/sessions/{sid}/compact", {"force": True})
    assert typo.status == 400 and typo.error["field"] == "$.force"
    query = node.call("GET", f"/v1/sessions/{sid}/checkpoints?limit=5")
    assert query.status == 400 and query.error["field"] == "query.limit"


def test_who_may_compact_restore_and_read_checkpoints(node: HttpNode) -> None:
    sid = node.session()
    talk(node, sid, say(1))
    talk(node, sid, say(2))
    made = node.call("POST", f"/v1/sessions/{sid}/compact").json()
    body = {"checkpoint": made["compaction_id"]}
    viewer = token(node, "user:vic", "viewer")
    for path, sent in (("compact", None), ("restore", body)):
        refused = call(node, "POST", f"/v1/sessions/{sid}/{path}", sent, auth=viewer)
        assert refused.status == 403, path
        assert f"session.{path}" in refused.error["message"]
    seen = call(node, "GET", f"/v1/sessions/{sid}/checkpoints", auth=viewer)
    assert seen.status == 200 and seen.json()["in_force"] == made["compaction_id"]

    operator = token(node, "user:olga", "operator")
    assert node.call("POST", f"/v1/sessions/{sid}/restore", body, auth=operator).status == 200
    # An agent only in the sessions it owns.
    agent = token(node, "agent:bot", "agent")
    assert node.call("POST", f"/v1/sessions/{sid}/compact", auth=agent).status == 403
    own = node.call("POST", "/v1/sessions", {}, auth=agent).json()["session_id"]
    assert node.call("POST", f"/v1/sessions/{own}/compact", auth=agent).status == 409  # allowed
