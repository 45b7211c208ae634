"""``reel learning`` through the API of the node that holds the data dir (the review is the token
principal's, decided by Cedar), and on the journal itself once the node has stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.transports.http.httpkit import close_node
from tests.transports.test_learning_node import open_learner
from transports.cli.errors import EXIT_DENIED, CliError
from transports.cli.main import app


def _code(result: object) -> int:
    exc = getattr(result, "exception", None)
    if exc is None:
        return int(getattr(result, "exit_code", 0))
    assert isinstance(exc, CliError), result
    return exc.code


def test_learning_from_the_cli_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    learner = open_learner(data_dir, apply_fact_bps=10_001, apply_preference_bps=8_000)
    data = str(data_dir)
    runner = CliRunner()
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(learner.node.server.port))
        run_id = learner.run("user:alice", "Remember that backups run at 02:00. I prefer tables.")
        listed = runner.invoke(app, ["learning", "list", "--data", data])
        assert listed.exit_code == 0, listed.output
        assert "pending" in listed.output and "backups run at 02:00" in listed.output
        assert "applied" in listed.output and "Prefer tables" in listed.output
        pending = runner.invoke(
            app, ["learning", "list", "--status", "pending", "--json", "--data", data]
        )
        (fact,) = json.loads(pending.output)
        cid = fact["candidate_id"]
        shown = runner.invoke(app, ["learning", "show", cid, "--data", data])
        assert shown.exit_code == 0 and f"run {run_id}" in shown.output
        assert "kind: fact" in shown.output and "status: pending" in shown.output

        viewer = tmp_path_factory.mktemp("t") / "viewer.token"
        viewer.write_text(learner.token("user:vic", "viewer"))
        refused = runner.invoke(
            app, ["learning", "accept", cid, "--token-file", str(viewer), "--data", data]
        )
        assert _code(refused) == EXIT_DENIED and "learning.review" in str(refused.exception)

        monkeypatch.setenv("REEL_TOKEN", learner.token("user:ann", "approver"))
        accepted = runner.invoke(app, ["learning", "accept", cid, "--data", data])
        assert accepted.exit_code == 0, accepted.output
        assert accepted.output.strip() == f"learning candidate {cid}: applied by user:ann"
        twice = runner.invoke(app, ["learning", "accept", cid, "--data", data])
        assert _code(twice) == 1 and "already applied" in str(twice.exception)
        rejecting = runner.invoke(app, ["learning", "reject", cid, "--data", data])
        assert _code(rejecting) == 1 and "roll it back" in str(rejecting.exception)
        bad = runner.invoke(app, ["learning", "list", "--status", "done", "--data", data])
        assert bad.exit_code == 2 and "--status" in bad.output
        wrong = runner.invoke(app, ["learning", "show", "nope", "--data", data])
        assert wrong.exit_code == 2
    finally:
        close_node(learner.node)

    # No node holds the data dir: the journal is read and written by the command itself.
    monkeypatch.delenv("REEL_TOKEN")
    offline = runner.invoke(app, ["learning", "list", "--json", "--data", data])
    assert offline.exit_code == 0, offline.output
    assert {c["status"] for c in json.loads(offline.output)} == {"applied"}
    rolled = runner.invoke(app, ["learning", "rollback", cid, "--reason", "moved", "--data", data])
    assert rolled.exit_code == 0, rolled.output
    assert rolled.output.strip() == f"learning candidate {cid}: rolled back by cli"
    again = runner.invoke(app, ["learning", "rollback", cid, "--data", data])
    assert _code(again) == 1 and "not applied" in str(again.exception)
    shown = runner.invoke(app, ["learning", "show", cid, "--json", "--data", data])
    record = json.loads(shown.output)
    assert (record["status"], record["decided_by"], record["reason"]) == (
        "rolled_back",
        "cli",
        "moved",
    )
