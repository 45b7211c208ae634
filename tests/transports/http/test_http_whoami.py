"""``GET /v1/whoami`` on a real node: who each kind of token speaks for, what its roles let it
do (the same Cedar decisions the routes take, operator policies included), and that asking
changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from policies import ACTIONS
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.http.openapi import document

CONSOLE_ACTIONS = (
    "session.create",
    "run.start",
    "run.cancel",
    "approval.resolve",
    "posture.set",
    "token.manage",
    "journal.read",
)


def make_token(node: HttpNode, principal: str, *roles: str) -> tuple[str, str]:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": list(roles)})
    assert reply.status == 201, reply
    body = reply.json()
    return body["token"], body["id"]


def whoami(node: HttpNode, token: str) -> dict[str, Any]:
    reply = node.call("GET", "/v1/whoami", auth=f"Bearer {token}")
    assert reply.status == 200, reply
    check(document(), "GET", "/v1/whoami", reply)
    body: dict[str, Any] = reply.json()
    return body


def granted(body: dict[str, Any], key: str = "may") -> set[str]:
    return {a for a in CONSOLE_ACTIONS if body[key][a]}


def test_each_role_sees_what_it_may_do(node: HttpNode) -> None:
    admin = whoami(node, node.token)
    assert admin["principal"] == "admin" and admin["roles"] == ["admin"]
    assert admin["token_id"] is None  # admin.token is no record of the token book
    assert set(admin["may"]) == set(ACTIONS) == set(admin["may_own"])
    assert granted(admin) == set(CONSOLE_ACTIONS)

    expected = {
        "viewer": {"journal.read"},
        "approver": {"approval.resolve", "journal.read"},
        "operator": set(CONSOLE_ACTIONS) - {"posture.set", "token.manage"},
        "agent": {"session.create"},
    }
    for role, may in expected.items():
        token, token_id = make_token(node, f"user:{role}", role)
        body = whoami(node, token)
        assert body["principal"] == f"user:{role}"
        assert body["roles"] == [role]
        assert body["token_id"] == token_id
        assert granted(body) == may, role
        assert token not in str(body)
    # An agent may start and cancel runs only where it owns the session.
    agent_token, _ = make_token(node, "agent:bot", "agent")
    agent = whoami(node, agent_token)
    assert not agent["may"]["run.start"] and agent["may_own"]["run.start"]
    assert agent["may_own"]["run.cancel"] and not agent["may_own"]["approval.resolve"]


def test_asking_changes_nothing(node: HttpNode) -> None:
    """No decision is recorded for asking; the token's first use is (``token.used``, once)."""
    token, _ = make_token(node, "user:olga", "operator")
    before = node.runtime.journal.committed_position
    for _ in range(3):
        whoami(node, token)
        whoami(node, node.token)
    assert eventually(lambda: node.runtime.journal.committed_position == before + 1)
    (used,) = node.runtime.journal.read(before, 10)
    assert (used.kind, used.principal) == ("token.used", "user:olga")


def test_a_bad_token_is_the_usual_401_and_parameters_are_refused(node: HttpNode) -> None:
    for auth in (None, "Bearer nope", "Bearer reel_01ARZ3NDEKTSV4RRFFQ69G5FAV_" + "x" * 43):
        reply = node.call("GET", "/v1/whoami", auth=auth)
        assert reply.status == 401 and reply.error["code"] == "unauthenticated"
    reply = node.call("GET", "/v1/whoami?as=admin")
    assert reply.status == 400 and reply.error["field"] == "query.as"


@pytest.fixture
def forbidding_node(data_dir: Path) -> Iterator[HttpNode]:
    """A node whose operator policy forbids operators to decide approvals."""
    (data_dir / "policies").mkdir()
    (data_dir / "policies" / "ops.cedar").write_text(
        '@id("no-operator-approvals")\n'
        'forbid (principal in Role::"operator", action == Action::"approval.resolve", resource);\n'
    )
    running = open_node(data_dir)
    try:
        yield running
    finally:
        close_node(running)


def test_operator_policies_decide_too(forbidding_node: HttpNode) -> None:
    token, _ = make_token(forbidding_node, "user:olga", "operator")
    body = whoami(forbidding_node, token)
    assert not body["may"]["approval.resolve"] and not body["may_own"]["approval.resolve"]
    assert body["may"]["run.start"]
