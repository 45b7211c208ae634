"""/v1/approvals: the queue and human decisions over HTTP."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.transports.http.httpkit import SHELL, HttpNode, close_node, open_node

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_allow_over_http_finishes_the_run_and_a_second_decision_is_409(node: HttpNode) -> None:
    run_id = node.start(SHELL)
    approval_id = node.pending_approval(run_id)

    pending = node.call("GET", "/v1/approvals?state=pending").json()
    assert [a["approval_id"] for a in pending["items"]] == [approval_id]
    record = node.call("GET", f"/v1/approvals/{approval_id}").json()
    assert record["state"] == "pending" and record["tool"] == "shell.run"
    assert record["arguments"] == {"argv": ["echo", "yo"]} and record["run_id"] == run_id

    decided = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "reason": "looks fine"}
    )
    assert decided.status == 200
    resolved = decided.json()
    assert resolved["state"] == "resolved" and resolved["decision"] == "allow"
    assert resolved["scope"] == "once" and resolved["decided_by"] == "admin"

    events = node.finish(run_id)
    assert events[-1].event == "run.completed"
    run = node.call("GET", f"/v1/runs/{run_id}").json()
    assert run["state"] == "done" and "yo" in run["answer"]

    again = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "deny"})
    assert again.status == 409
    assert again.error["code"] == "conflict"
    assert node.call("GET", "/v1/approvals?state=pending").json()["items"] == []
    done = node.call("GET", "/v1/approvals?state=resolved").json()["items"]
    assert [a["approval_id"] for a in done] == [approval_id]
    assert node.call("GET", "/v1/approvals").json()["items"] == done


def test_deny_with_session_scope_is_recorded(node: HttpNode) -> None:
    run_id = node.start(SHELL)
    approval_id = node.pending_approval(run_id)
    reply = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "deny", "scope": "session"}
    )
    assert reply.status == 200
    assert reply.json()["decision"] == "deny"
    events = node.finish(run_id)
    resolved = [e.entry["event"] for e in events if e.event == "tool.approval_resolved"]
    assert resolved[0]["decision"] == "deny"
    assert events[-1].event in {"run.completed", "run.failed"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"decision": "maybe"}', "$.decision"),
        (b"{}", "$.decision"),
        (b'{"decision": true}', "$.decision"),
        (b'{"decision": "allow", "scope": "forever"}', "$.scope"),
        (b'{"decision": "allow", "by": "me"}', "$.by"),
        (b'{"decision": "allow", "reason": 3}', "$.reason"),
        (b"", "$"),
        (b"\x00\xff", "$"),
    ],
)
def test_bad_decisions_are_400_with_the_field(node: HttpNode, body: bytes, field: str) -> None:
    reply = node.call("POST", f"/v1/approvals/{UNKNOWN}", raw=body)
    assert reply.status == 400
    assert reply.error["field"] == field


def test_unknown_approvals_and_bad_filters(node: HttpNode) -> None:
    assert node.call("GET", f"/v1/approvals/{UNKNOWN}").status == 404
    reply = node.call("POST", f"/v1/approvals/{UNKNOWN}", {"decision": "allow"})
    assert (reply.status, reply.error["code"]) == (404, "not_found")
    assert node.call("POST", "/v1/approvals/nope", {"decision": "allow"}).status == 404
    for query in ("state=bogus", "state="):
        bad = node.call("GET", f"/v1/approvals?{query}")
        assert (bad.status, bad.error["field"]) == (400, "query.state")
    clamped = node.call("GET", "/v1/approvals?limit=201").json()
    assert clamped["limit"] == 200 and clamped["limit_clamped"] is True


def test_a_decision_is_answered_once_durable_not_when_the_tool_finishes(data_dir: Path) -> None:
    """The approved tool sleeps 20 s: the POST answers at once with the recorded decision, and
    a second decision while the tool runs is a prompt 409 (never queued behind the tool)."""
    node = open_node(data_dir, shell=("sleep",))
    try:
        run_id = node.start('/tool shell.run {"argv": ["sleep", "20"]}')
        approval_id = node.pending_approval(run_id)
        started = time.monotonic()
        decided = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
        assert decided.status == 200, decided
        assert time.monotonic() - started < 5
        record = decided.json()
        assert (record["state"], record["decision"], record["decided_by"]) == (
            "resolved",
            "allow",
            "admin",
        )
        stream, _ = node.until(run_id, "run.resumed")  # the tool is running now
        stream.close()
        started = time.monotonic()
        again = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "deny"})
        assert (again.status, again.error["code"]) == (409, "conflict")
        assert time.monotonic() - started < 5
        run = node.call("GET", f"/v1/runs/{run_id}").json()
        assert run["state"] == "in_progress"  # still sleeping
        assert node.call("POST", f"/v1/runs/{run_id}/cancel").status == 202
        assert node.finish(run_id)[-1].event == "run.cancelled"
    finally:
        close_node(node)


def test_a_pending_approval_offers_its_choices_and_a_prefix_grant_says_what_it_covers(
    node: HttpNode,
) -> None:
    session_id = node.session()
    run_id = node.start('x\n/tool shell.run {"argv": ["echo", "yo", "there"]}', session_id)
    approval_id = node.pending_approval(run_id)
    record = node.call("GET", f"/v1/approvals/{approval_id}").json()
    assert record["covers"] == ""
    choices = {(o["scope"], o["match"]): o["covers"] for o in record["options"]}
    assert set(choices) == {
        ("once", "any"),
        ("session", "exact"),
        ("session", "prefix"),
        ("session", "any"),
        ("always", "any"),
    }
    assert "argv starts with a prefix you type" in choices[("session", "prefix")]
    assert "any arguments in this session" in choices[("session", "any")]
    listed = node.call("GET", f"/v1/approvals?run_id={run_id}").json()["items"]
    assert listed[0]["options"] == record["options"]

    bad = node.call(
        "POST",
        f"/v1/approvals/{approval_id}",
        {"decision": "allow", "scope": "session", "match": "prefix", "prefix": "echo 'yo"},
    )
    assert bad.status == 400 and bad.error["field"] == "$.prefix"
    once = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "match": "exact"}
    )
    assert once.status == 400 and once.error["field"] == "$.match"

    decided = node.call(
        "POST",
        f"/v1/approvals/{approval_id}",
        {"decision": "allow", "scope": "session", "match": "prefix", "prefix": "echo yo"},
    ).json()
    assert (decided["match"], decided["prefix"]) == ("prefix", "echo yo")
    assert decided["covers"] == (
        "shell.run with arguments starting with 'echo yo' in this session, until it resets"
    )
    assert decided["options"] == []
    node.finish(run_id)

    covered = node.start('x\n/tool shell.run {"argv": ["echo", "yo"]}', session_id)
    events = node.finish(covered)
    decisions = [e.entry["event"] for e in events if e.event == "tool.decided"]
    assert decisions[0]["grant"] == "session"
    outside = node.start('x\n/tool shell.run {"argv": ["echo", "no"]}', session_id)
    node.pending_approval(outside)
