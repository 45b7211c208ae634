"""``reel approvals`` through the API of the node that holds the data dir: the decision is the
token principal's, Cedar decides whether it may make it, and the run continues at once."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.transports.http.httpkit import SHELL, HttpNode
from transports.cli.errors import EXIT_DENIED, CliError
from transports.cli.main import app


def _code(result: object) -> int:
    """The exit code ``reel`` gives for the command's CliError (the runner sees the raise)."""
    exc = getattr(result, "exception", None)
    assert isinstance(exc, CliError), result
    return exc.code


def _token(node: HttpNode, principal: str, role: str) -> str:
    made = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert made.status == 201, made.body
    return str(made.json()["token"])


def test_approvals_from_the_cli_while_the_node_runs(
    node: HttpNode, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
    data = str(node.runtime.data_dir)
    runner = CliRunner()
    run_id = node.start(SHELL)
    approval_id = node.pending_approval(run_id)

    listed = runner.invoke(app, ["approvals", "list", "--data", data])
    assert listed.exit_code == 0, listed.output
    text = listed.output
    assert approval_id in text and '{"argv": ["echo", "yo"]}' in text
    assert "risk=critical" in text and f"run={run_id}" in text and "asked by admin" in text
    as_json = runner.invoke(app, ["approvals", "list", "--json", "--run", run_id, "--data", data])
    (record,) = json.loads(as_json.output)
    assert record["approval_id"] == approval_id and record["options"]

    viewer = tmp_path_factory.mktemp("t") / "viewer.token"
    viewer.write_text(_token(node, "user:vic", "viewer"))
    refused = runner.invoke(
        app, ["approvals", "approve", approval_id, "--token-file", str(viewer), "--data", data]
    )
    assert _code(refused) == EXIT_DENIED and "approval.resolve" in str(refused.exception)
    assert node.call("GET", f"/v1/approvals/{approval_id}").json()["state"] == "pending"

    monkeypatch.setenv("REEL_TOKEN", _token(node, "user:alice", "approver"))
    bad = runner.invoke(
        app,
        [
            *("approvals", "approve", approval_id, "--scope", "session", "--match", "prefix"),
            *("--prefix", "echo 'yo", "--data", data),
        ],
    )
    assert _code(bad) == 2 and str(bad.exception).startswith("--prefix: ")
    approved = runner.invoke(
        app,
        [
            *("approvals", "approve", approval_id, "--scope", "session", "--match", "exact"),
            *("--data", data),
        ],
    )
    assert approved.exit_code == 0, approved.output
    assert "allow by user:alice" in approved.output and "these exact arguments" in approved.output
    events = node.finish(run_id)
    assert events[-1].event == "run.completed"
    record = node.call("GET", f"/v1/approvals/{approval_id}").json()
    assert (record["decided_by"], record["match"]) == ("user:alice", "exact")

    again = runner.invoke(app, ["approvals", "deny", approval_id, "--data", data])
    assert _code(again) == 1 and "nothing changed" in str(again.exception)
    history = runner.invoke(app, ["approvals", "list", "--all", "--data", data])
    assert "allow by user:alice (scope session): grants shell.run with these exact" in (
        history.output
    )


def test_revoke_an_always_grant_while_the_node_runs(
    node: HttpNode, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """``reel approvals revoke`` goes through the node's API (``grant.revoke``): the grant ends
    at once, the next call asks again, and a second revocation changes nothing (exit 1)."""
    monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
    data = str(node.runtime.data_dir)
    runner = CliRunner()
    run_id = node.start(SHELL)
    approval_id = node.pending_approval(run_id)
    allowed = node.call(
        "POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "scope": "always"}
    )
    assert allowed.status == 200, allowed
    node.finish(run_id)
    gate = node.runtime.node.services.gate
    assert gate.has_always("admin", "shell.run")
    revoke = ("approvals", "revoke", "--principal", "admin", "--tool", "shell.run", "--data", data)

    viewer = tmp_path_factory.mktemp("t") / "viewer.token"
    viewer.write_text(_token(node, "user:vic", "viewer"))
    refused = runner.invoke(app, [*revoke, "--token-file", str(viewer)])
    assert _code(refused) == EXIT_DENIED and "grant.revoke" in str(refused.exception)
    bad = runner.invoke(app, [*revoke[:-4], "--tool", "Shell Run", "--data", data])
    assert _code(bad) == 2 and str(bad.exception).startswith("--tool: ")
    assert gate.has_always("admin", "shell.run")

    monkeypatch.setenv("REEL_TOKEN", _token(node, "user:alice", "approver"))
    done = runner.invoke(app, list(revoke))
    assert done.exit_code == 0, done.output
    assert "revoked: admin must be asked again for shell.run" in done.output
    assert not gate.has_always("admin", "shell.run")
    (row,) = node.runtime.journal.read_stream("grants")
    assert (row.kind, row.principal) == ("grant.revoked", "user:alice")
    assert node.pending_approval(node.start(SHELL))

    again = runner.invoke(app, list(revoke))
    assert _code(again) == 1
    assert str(again.exception) == "admin has no always grant for shell.run; nothing changed"
