"""``reel tokens`` through the API of the node that holds the data dir."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.transports.http.httpkit import HttpNode
from transports.cli.main import app


def test_tokens_through_a_running_node(node: HttpNode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
    data = str(node.runtime.data_dir)
    runner = CliRunner()
    made = runner.invoke(
        app,
        [
            "tokens",
            "create",
            "--principal",
            "user:carol",
            "--role",
            "viewer",
            "--json",
            "--data",
            data,
        ],
    )
    assert made.exit_code == 0, made.output
    created = json.loads(made.output)
    assert created["principal"] == "user:carol" and created["roles"] == ["viewer"]
    token = created["token"]
    assert node.call("GET", "/v1/sessions", auth=f"Bearer {token}").status == 200

    listed = runner.invoke(app, ["tokens", "list", "--json", "--data", data])
    assert listed.exit_code == 0 and token not in listed.output
    assert created["id"] in {t["id"] for t in json.loads(listed.output)}

    # A viewer's token may not manage tokens: the node's 403, as one line.
    monkeypatch.setenv("REEL_TOKEN", token)
    refused = runner.invoke(app, ["tokens", "list", "--data", data])
    assert refused.exit_code != 0 and "token.manage" in str(refused.exception)
    monkeypatch.delenv("REEL_TOKEN")

    revoked = runner.invoke(app, ["tokens", "revoke", created["id"], "--data", data])
    assert revoked.exit_code == 0, revoked.output
    assert node.call("GET", "/v1/sessions", auth=f"Bearer {token}").status == 401
    bad_role = runner.invoke(
        app, ["tokens", "create", "--principal", "user:x", "--role", "wizard", "--data", data]
    )
    assert bad_role.exit_code == 2 and "admin" in bad_role.output
