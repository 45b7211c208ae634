"""/v1/sessions: create, list (paged, clamped), read, send a message, reset, branch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.transports.http.httpkit import HttpNode, close_node, open_node
from transports.config import SessionsConfig

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_create_read_and_list_a_session(node: HttpNode) -> None:
    created = node.call("POST", "/v1/sessions", {"label": "first"})
    assert created.status == 201
    session = created.json()
    assert session["label"] == "first" and session["principal"] == "admin"
    assert node.call("GET", f"/v1/sessions/{session['session_id']}").json() == session
    listed = node.call("GET", "/v1/sessions").json()
    assert [s["session_id"] for s in listed["items"]] == [session["session_id"]]
    assert listed["limit"] == 50 and listed["limit_clamped"] is False
    assert listed["next_after"] is None


def test_create_with_a_key_twice_returns_the_same_session(node: HttpNode) -> None:
    first = node.call("POST", "/v1/sessions", {"session_key": "ops"})
    again = node.call("POST", "/v1/sessions", {"session_key": "ops"})
    assert (first.status, again.status) == (201, 200)
    assert first.json()["session_id"] == again.json()["session_id"]
    assert node.call("POST", "/v1/sessions", raw=b"").status == 201  # the body is optional


def test_sessions_are_paged_with_a_cursor_and_the_cap_is_said(node: HttpNode) -> None:
    ids = [node.session() for _ in range(3)]
    first = node.call("GET", "/v1/sessions?limit=2").json()
    assert [s["session_id"] for s in first["items"]] == ids[:2]
    assert first["next_after"] == ids[1]
    second = node.call("GET", f"/v1/sessions?limit=2&after={first['next_after']}").json()
    assert [s["session_id"] for s in second["items"]] == ids[2:]
    assert second["next_after"] is None
    clamped = node.call("GET", "/v1/sessions?limit=5000").json()
    assert clamped["limit"] == 200 and clamped["limit_clamped"] is True
    assert len(clamped["items"]) == 3


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "query.limit"),
        ("limit=-3", "query.limit"),
        ("limit=ten", "query.limit"),
        ("limit=", "query.limit"),
        ("limit=99999999999999999999999", "query.limit"),
        ("after=not-an-id", "query.after"),
        ("after=", "query.after"),
    ],
)
def test_bad_paging_parameters_are_400_naming_them(node: HttpNode, query: str, field: str) -> None:
    reply = node.call("GET", f"/v1/sessions?{query}")
    assert reply.status == 400
    assert reply.error["code"] == "invalid_argument"
    assert reply.error["field"] == field


@pytest.mark.parametrize("session_id", [UNKNOWN, "nope", "..%2F..%2Fetc"])
def test_unknown_sessions_are_404(node: HttpNode, session_id: str) -> None:
    for method, path in [
        ("GET", f"/v1/sessions/{session_id}"),
        ("GET", f"/v1/sessions/{session_id}/runs"),
        ("POST", f"/v1/sessions/{session_id}/reset"),
        ("POST", f"/v1/sessions/{session_id}/branch"),
    ]:
        reply = node.call(method, path)
        assert reply.status == 404, (method, path, reply)
        assert reply.error["code"] == "not_found"
    reply = node.call("POST", f"/v1/sessions/{session_id}/messages", {"text": "hi"})
    assert reply.status == 404


def test_a_message_starts_a_run_that_is_readable_at_once(node: HttpNode) -> None:
    sid = node.session()
    reply = node.call("POST", f"/v1/sessions/{sid}/messages", {"text": "hello there"})
    assert reply.status == 202
    ticket = reply.json()
    assert ticket["session_id"] == sid and ticket["session_created"] is False
    assert reply.headers["location"] == f"/v1/runs/{ticket['run_id']}"
    # read-your-writes: the run is in the views when the POST returns
    assert node.call("GET", f"/v1/runs/{ticket['run_id']}").status == 200
    events = node.finish(ticket["run_id"])
    assert events[-1].event == "run.completed"
    run = node.call("GET", f"/v1/runs/{ticket['run_id']}").json()
    assert run["state"] == "done" and run["answer"] == "hello there"
    runs = node.call("GET", f"/v1/sessions/{sid}/runs").json()
    assert [r["run_id"] for r in runs["items"]] == [ticket["run_id"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"", "$"),
        (b"{bad", "$"),
        (b"[]", "$"),
        (b"{}", "$.text"),
        (b'{"text": 5}', "$.text"),
        (b'{"text": "hi", "extra": 1}', "$.extra"),
        (b'{"text": "   "}', "$.text"),
        (b'{"text": "hi", "label": ["x"]}', "$.label"),
    ],
)
def test_bad_message_bodies_are_400_with_the_field(node: HttpNode, body: bytes, field: str) -> None:
    sid = node.session()
    reply = node.call("POST", f"/v1/sessions/{sid}/messages", raw=body)
    assert reply.status == 400, reply
    assert reply.error == {
        "code": "invalid_argument",
        "message": reply.error["message"],
        "field": field,
    }
    assert reply.error["message"]


def test_a_message_over_the_node_limit_is_refused_naming_text(data_dir: Path) -> None:
    running = open_node(data_dir, sessions=SessionsConfig(max_message_bytes=10))
    try:
        sid = running.session()
        reply = running.call("POST", f"/v1/sessions/{sid}/messages", {"text": "x" * 11})
        assert reply.status == 400
        assert reply.error["field"] == "$.text" and "limit is 10" in reply.error["message"]
    finally:
        close_node(running)


def test_reset_and_branch(node: HttpNode) -> None:
    sid = node.session(label="base")
    run_id = node.start("remember me", sid)
    node.finish(run_id)

    reset = node.call("POST", f"/v1/sessions/{sid}/reset")
    assert reset.status == 200
    assert reset.json()["resets"] == 1

    branch = node.call("POST", f"/v1/sessions/{sid}/branch", {"label": "fork"})
    assert branch.status == 201
    fork = branch.json()
    assert fork["session_id"] != sid
    assert fork["parent_session_id"] == sid and fork["label"] == "fork"
    assert node.call("GET", f"/v1/sessions/{fork['session_id']}").status == 200

    not_in_history = node.call("POST", f"/v1/sessions/{sid}/branch", {"run_id": sid})
    assert not_in_history.status == 400
    assert not_in_history.error["field"] == "$.run_id"
    not_an_id = node.call("POST", f"/v1/sessions/{sid}/branch", {"run_id": "x"})
    assert (not_an_id.status, not_an_id.error["field"]) == (400, "$.run_id")
    unknown_field = node.call("POST", f"/v1/sessions/{sid}/reset", {"hard": True})
    assert (unknown_field.status, unknown_field.error["field"]) == (400, "$.hard")


def test_a_taken_session_key_on_branch_is_409(node: HttpNode) -> None:
    sid = node.session(session_key="taken")
    node.finish(node.start("one", sid))
    reply = node.call("POST", f"/v1/sessions/{sid}/branch", {"session_key": "taken"})
    assert reply.status == 409
    assert reply.error["code"] == "conflict"


def test_a_session_posture_override_decides_its_calls(node: HttpNode) -> None:
    sid = node.session()
    reply = node.call(
        "POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": "disabled"}
    )
    assert reply.status == 200, reply
    events = node.finish(node.start('/tool echo {"text": "x"}', sid))
    decided = next(e.entry["event"] for e in events if e.event == "tool.decided")
    assert decided["outcome"] == "deny"
    assert decided["policy_ids"] == ["baseline.posture_disabled"]
    other = node.finish(node.start('/tool echo {"text": "x"}'))
    assert next(e.entry["event"] for e in other if e.event == "tool.decided")["outcome"] == "allow"
    cleared = node.call("POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": None})
    assert cleared.status == 200
    again = node.finish(node.start('/tool echo {"text": "y"}', sid))
    assert next(e.entry["event"] for e in again if e.event == "tool.decided")["outcome"] == "allow"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tool": "nope", "posture": "disabled"}, "$.tool"),
        ({"tool": "echo", "posture": "sometimes"}, "$.posture"),
        ({"posture": "disabled"}, "$.tool"),
    ],
)
def test_bad_posture_bodies_are_400_naming_the_field(
    node: HttpNode, body: dict[str, object], field: str
) -> None:
    sid = node.session()
    reply = node.call("POST", f"/v1/sessions/{sid}/postures", body)
    assert reply.status == 400, reply
    assert reply.json()["error"]["field"] == field
