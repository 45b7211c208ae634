"""``POST /v1/grants/revoke`` on a running node: an ``always`` grant ends while the node runs,
``grant.revoked`` is journaled first, Cedar decides who may, and bad input names its field."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from actors.approvals.always_grants import GRANTS_STREAM
from tests.transports.http.httpkit import SHELL, HttpNode, HttpReply, close_node, open_node
from tests.transports.http.test_http_openapi import check
from transports.http.openapi import document

REVOKE = "/v1/grants/revoke"


def grant_always(node: HttpNode, runner: HttpNode | None = None, principal: str = "admin") -> None:
    """``runner``'s run (the admin's by default) asks for shell.run; the admin allows it
    ``always``."""
    runner = runner or node
    run_id = runner.start(SHELL)
    approval_id = runner.pending_approval(run_id)
    decided = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "scope": "always"}
    )
    assert decided.status == 200, decided
    runner.finish(run_id)
    assert node.runtime.node.services.gate.has_always(principal, "shell.run")


def token(node: HttpNode, principal: str, role: str) -> str:
    made = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert made.status == 201, made
    return f"Bearer {made.json()['token']}"


def revoke(node: HttpNode, body: Any, auth: str = "default") -> HttpReply:
    reply = node.call("POST", REVOKE, body, auth=auth)
    check(document(), "POST", REVOKE, reply)
    return reply


def revocations(node: HttpNode) -> list[tuple[Any, str]]:
    return [
        (row.decode(), row.principal) for row in node.runtime.journal.read_stream(GRANTS_STREAM)
    ]


def test_an_always_grant_is_revoked_while_the_node_runs(node: HttpNode) -> None:
    grant_always(node)
    viewer = token(node, "user:vic", "viewer")
    denied = revoke(node, {"principal": "admin", "tool": "shell.run"}, auth=viewer)
    assert denied.status == 403 and "grant.revoke" in denied.error["message"]
    assert revocations(node) == []

    approver = token(node, "user:alice", "approver")
    done = revoke(node, {"principal": "admin", "tool": "shell.run"}, auth=approver)
    assert done.status == 200, done
    assert done.json() == {"principal": "admin", "tool": "shell.run", "revoked_by": "user:alice"}
    ((event, by),) = revocations(node)
    assert (event.principal, event.tool, by) == ("admin", "shell.run", "user:alice")
    assert not node.runtime.node.services.gate.has_always("admin", "shell.run")

    # the admin's next call of the tool asks again
    again = node.start(SHELL)
    assert node.pending_approval(again)

    twice = revoke(node, {"principal": "admin", "tool": "shell.run"})
    assert twice.status == 409 and twice.error["code"] == "conflict"
    assert "admin has no always grant for shell.run" in twice.error["message"]
    assert len(revocations(node)) == 1


def test_bad_input_names_its_field_and_records_nothing(node: HttpNode) -> None:
    cases = [
        ({"principal": "admin", "tool": "Shell Run"}, "$.tool"),
        ({"principal": "", "tool": "shell.run"}, "$.principal"),
        ({"principal": "admin bob", "tool": "shell.run"}, "$.principal"),
        ({"principal": "admin"}, "$.tool"),
        ({"principal": "admin", "tool": ""}, "$.tool"),
        ({"principal": "admin", "tool": "shell.run", "scope": "all"}, "$.scope"),
        ({"principal": 7, "tool": "shell.run"}, "$.principal"),
    ]
    for body, field in cases:
        reply = revoke(node, body)
        assert (reply.status, reply.error["code"], reply.error["field"]) == (
            400,
            "invalid_argument",
            field,
        ), (body, reply)
    assert revocations(node) == []


NO_SELF_REVOKE = """
@id("ops.no-self-revoke")
forbid (principal, action == Action::"grant.revoke", resource)
when { context.grant_principal == principal };
"""


def test_the_context_names_whose_grant_it_is(data_dir: Path) -> None:
    """The example of policies/approvals.cedar and docs/policy.md holds: an operator policy on
    ``context.grant_principal`` keeps an operator from revoking their own grant, and no one
    else."""
    (data_dir / "policies").mkdir(exist_ok=True)
    (data_dir / "policies" / "ops.cedar").write_text(NO_SELF_REVOKE)
    node = open_node(data_dir)
    try:
        olga = token(node, "user:olga", "operator")
        grant_always(
            node, dataclasses.replace(node, token=olga.removeprefix("Bearer ")), "user:olga"
        )
        own = revoke(node, {"principal": "user:olga", "tool": "shell.run"}, auth=olga)
        assert own.status == 403 and "grant.revoke" in own.error["message"], own
        assert revocations(node) == []
        alice = token(node, "user:alice", "approver")
        done = revoke(node, {"principal": "user:olga", "tool": "shell.run"}, auth=alice)
        assert done.status == 200, done
        assert not node.runtime.node.services.gate.has_always("user:olga", "shell.run")
    finally:
        close_node(node)
