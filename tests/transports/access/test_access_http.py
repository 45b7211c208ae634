"""Who may do what over HTTP, against a real node: tokens for each built-in role, every route
a Cedar decision, the caller's principal on the events, revocation on a live node."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from events.catalog import AccessDecided, TokenCreated
from tests.events.decoded import decoded
from tests.transports.http.httpkit import SHELL, HttpNode, eventually

ROLES = ("admin", "operator", "approver", "viewer", "agent")


def make_token(node: HttpNode, principal: str, *roles: str, **extra: Any) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": list(roles), **extra})
    assert reply.status == 201, reply
    body = reply.json()
    assert body["principal"] == principal and body["roles"] == sorted(roles)
    token: str = body["token"]
    return token


def as_(token: str) -> str:
    return f"Bearer {token}"


@pytest.fixture
def tokens(node: HttpNode) -> dict[str, str]:
    out = {role: make_token(node, f"user:{role}", role) for role in ROLES}
    out["other-agent"] = make_token(node, "agent:other", "agent")
    return out


def test_roles_by_action_over_http(node: HttpNode, tokens: dict[str, str]) -> None:
    # The agent's own session and run; an admin's session the agent does not own.
    own = node.call("POST", "/v1/sessions", {}, auth=as_(tokens["agent"]))
    assert own.status == 201 and own.json()["principal"] == "user:agent", own
    own_id = own.json()["session_id"]
    run = node.call(
        "POST", f"/v1/sessions/{own_id}/messages", {"text": "hi"}, auth=as_(tokens["agent"])
    )
    assert run.status == 202, run
    own_run = run.json()["run_id"]
    node.finish(own_run)
    theirs = node.session()
    their_run = node.start("hello", theirs)
    node.finish(their_run)

    cases: list[tuple[str, str, Any, dict[str, int]]] = [
        # (method, path, body, {role: status})
        ("GET", "/v1/sessions", None, dict.fromkeys(ROLES, 200)),
        ("GET", f"/v1/sessions/{theirs}", None, {**dict.fromkeys(ROLES, 200), "agent": 403}),
        ("GET", f"/v1/sessions/{own_id}", None, {**dict.fromkeys(ROLES, 200), "other-agent": 403}),
        ("GET", f"/v1/runs/{their_run}", None, {**dict.fromkeys(ROLES, 200), "agent": 403}),
        ("GET", f"/v1/runs/{own_run}/tape", None, {**dict.fromkeys(ROLES, 200)}),
        ("GET", f"/v1/runs/{own_run}", None, {"other-agent": 403}),
        (
            "POST",
            "/v1/sessions",
            {},
            {"admin": 201, "operator": 201, "approver": 403, "viewer": 403, "agent": 201},
        ),
        (
            "POST",
            f"/v1/sessions/{theirs}/messages",
            {"text": "x"},
            {"admin": 202, "operator": 202, "approver": 403, "viewer": 403, "agent": 403},
        ),
        ("POST", f"/v1/sessions/{own_id}/messages", {"text": "x"}, {"agent": 202}),
        (
            "POST",
            f"/v1/sessions/{theirs}/postures",
            {"tool": "shell.run", "posture": "disabled"},
            {"admin": 200, "operator": 403, "approver": 403, "viewer": 403, "agent": 403},
        ),
        (
            "POST",
            f"/v1/sessions/{theirs}/reset",
            None,
            {"admin": 200, "operator": 200, "approver": 403, "viewer": 403, "agent": 403},
        ),
        (
            "GET",
            "/v1/journal/head",
            None,
            {"admin": 200, "operator": 200, "approver": 200, "viewer": 200, "agent": 403},
        ),
        (
            "GET",
            "/metrics",
            None,
            {"admin": 200, "operator": 200, "approver": 200, "viewer": 200, "agent": 403},
        ),
        (
            "GET",
            "/v1/tokens",
            None,
            {"admin": 200, "operator": 403, "approver": 403, "viewer": 403, "agent": 403},
        ),
        ("GET", "/v1/approvals", None, dict.fromkeys(ROLES, 200)),
    ]
    failures = []
    for method, path, body, expected in cases:
        for role, status in expected.items():
            reply = node.call(method, path, body, auth=as_(tokens[role]))
            if reply.status != status:
                failures.append((role, method, path, status, reply.status, reply.body[:200]))
            elif status == 403:
                error = reply.error
                assert error["code"] == "permission_denied"
                assert "is not permitted" in error["message"]
    assert not failures, failures

    # Lists are filtered: the agent sees only its own sessions.
    listed = node.call("GET", "/v1/sessions", auth=as_(tokens["agent"])).json()["items"]
    assert listed and {s["principal"] for s in listed} == {"user:agent"}
    assert theirs not in {s["session_id"] for s in listed}


def test_a_denial_names_the_action_and_the_policies(node: HttpNode, tokens: dict[str, str]) -> None:
    reply = node.call("GET", "/v1/tokens", auth=as_(tokens["viewer"]))
    assert reply.status == 403
    assert reply.error["code"] == "permission_denied"
    assert "token.manage" in reply.error["message"]
    assert "denied by default" in reply.error["message"]


def test_bad_tokens_are_one_401(node: HttpNode, tokens: dict[str, str]) -> None:
    expired = make_token(node, "user:late", "viewer", expires_in_s=1)
    revoked = make_token(node, "user:gone", "viewer")
    listed = node.call("GET", "/v1/tokens").json()["items"]
    gone_id = next(t["id"] for t in listed if t["principal"] == "user:gone")
    assert node.call("DELETE", f"/v1/tokens/{gone_id}").status == 200
    time.sleep(1.1)
    unknown = tokens["viewer"][:-4] + "AAAA"
    bodies = set()
    for bad in (expired, revoked, unknown, "nonsense", ""):
        reply = node.call("GET", "/v1/sessions", auth=as_(bad))
        assert reply.status == 401, bad
        assert bad == "" or bad.encode() not in reply.body
        bodies.add(reply.body)
    assert len(bodies) == 1


def test_token_requests_name_the_bad_field(node: HttpNode, tokens: dict[str, str]) -> None:
    reply = node.call("POST", "/v1/tokens", {"principal": "user:x", "roles": ["wizard"]})
    assert reply.status == 400 and reply.error["field"] == "$.roles", reply
    reply = node.call("POST", "/v1/tokens", {"principal": "Root", "roles": ["viewer"]})
    assert reply.status == 400 and reply.error["field"] == "$.principal", reply
    reply = node.call("DELETE", "/v1/tokens/01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert reply.status == 404
    reply = node.call("DELETE", "/v1/tokens/01ARZ3NDEKTSV4RRFFQ69G5FAV", auth=as_(tokens["agent"]))
    assert reply.status == 403


def test_a_token_s_note_is_echoed_and_listed_as_stored_redacted(node: HttpNode) -> None:
    """The journal keeps a note with its secrets redacted; the 201, the list and a restart's
    fold all say the same, never the secret."""
    secret = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
    reply = node.call(
        "POST",
        "/v1/tokens",
        {"principal": "user:ci", "roles": ["viewer"], "note": f"for the deploy job {secret}"},
    )
    assert reply.status == 201, reply
    echoed = reply.json()["note"]
    assert secret not in echoed and echoed.startswith("for the deploy job ")
    (stored,) = [
        decoded(e, TokenCreated).note
        for e in node.runtime.journal.events_of_kinds(("token.created",))
    ]
    assert echoed == stored
    listed = node.call("GET", "/v1/tokens").json()["items"]
    assert [t["note"] for t in listed if t["principal"] == "user:ci"] == [stored]
    assert secret.encode() not in reply.body


def test_revocation_takes_effect_on_the_live_node(node: HttpNode) -> None:
    token = make_token(node, "user:temp", "viewer")
    assert node.call("GET", "/v1/sessions", auth=as_(token)).status == 200
    token_id = token.split("_")[1]
    revoked = node.call("DELETE", f"/v1/tokens/{token_id}")
    assert revoked.status == 200 and revoked.json()["state"] == "revoked"
    started = time.monotonic()
    assert eventually(lambda: node.call("GET", "/v1/sessions", auth=as_(token)).status == 401, 1.0)
    assert time.monotonic() - started < 1.0
    again = node.call("DELETE", f"/v1/tokens/{token_id}")
    assert again.status == 409


def test_the_principal_on_every_event_of_a_scripted_session(
    node: HttpNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    operator = make_token(node, "user:alice", "operator")
    approver = make_token(node, "user:bob", "approver")
    created = node.call("POST", "/v1/sessions", {"label": "audit"}, auth=as_(operator))
    session_id = created.json()["session_id"]
    started = node.call(
        "POST", f"/v1/sessions/{session_id}/messages", {"text": SHELL}, auth=as_(operator)
    )
    run_id = started.json()["run_id"]
    approval_id = node.pending_approval(run_id)
    decided = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "allow"}, auth=as_(approver)
    )
    assert decided.status == 200 and decided.json()["decided_by"] == "user:bob"
    node.finish(run_id)
    second = node.call(
        "POST", f"/v1/sessions/{session_id}/messages", {"text": SHELL}, auth=as_(operator)
    )
    second_run = second.json()["run_id"]
    node.pending_approval(second_run)  # waiting for a human: cancelling it is not too late
    cancel = node.call("POST", f"/v1/runs/{second_run}/cancel", None, auth=as_(operator))
    assert cancel.status == 202
    node.finish(second_run)
    node.call("POST", f"/v1/sessions/{session_id}/reset", None, auth=as_(operator))

    rows = node.runtime.journal.read(0, 100_000)
    ours = [
        r for r in rows if session_id in r.stream or run_id in r.stream or second_run in r.stream
    ]
    assert ours
    principals = {(r.kind, r.principal) for r in ours}
    assert {p for _, p in principals} <= {"user:alice", "user:bob"}, principals
    assert ("tool.approval_resolved", "user:bob") in principals or any(
        r.kind == "tool.approval_resolved" and r.principal == "user:bob" for r in rows
    ), principals
    decisions = [r for r in rows if r.kind == "access.decided"]
    assert {r.principal for r in decisions} >= {"user:alice", "user:bob"}
    assert {decoded(r, AccessDecided).action for r in decisions} >= {
        "run.start",
        "approval.resolve",
    }
    assert not {r.principal for r in rows} & {"http", "grpc"}

    # No token in the journal file, the views or the logs.
    secret_parts = [t.split("_", 2)[2] for t in (operator, approver)] + [node.token]  # may hold "_"
    for path in Path(node.runtime.data_dir).glob("*.db*"):
        data = path.read_bytes()
        assert not any(part.encode() in data for part in secret_parts), path
    assert not any(part in caplog.text for part in secret_parts)


def test_a_session_grant_is_recorded_as_the_approvers(node: HttpNode) -> None:
    operator = make_token(node, "user:alice", "operator")
    approver = make_token(node, "user:bob", "approver")
    session_id = node.call("POST", "/v1/sessions", {}, auth=as_(operator)).json()["session_id"]
    started = node.call(
        "POST", f"/v1/sessions/{session_id}/messages", {"text": SHELL}, auth=as_(operator)
    )
    run_id = started.json()["run_id"]
    approval_id = node.pending_approval(run_id)
    allow = {"decision": "allow", "scope": "session"}
    decided = node.call("POST", f"/v1/approvals/{approval_id}", allow, auth=as_(approver))
    assert decided.status == 200, decided
    node.finish(run_id)
    granted = [
        r for r in node.runtime.journal.read_stream(f"session/{session_id}")
        if r.kind == "session.grant_added"
    ]  # fmt: skip
    assert [r.principal for r in granted] == ["user:bob"]
