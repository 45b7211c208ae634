"""``reel incidents list`` through the running node's API (with a token, decided by Cedar) and,
once the node has stopped, folded from the journal itself: the same incidents either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.transports.http.httpkit import close_node, eventually, open_node
from transports.cli.errors import CliError
from transports.cli.main import app
from transports.config import WatchdogSection

STUCK = '/tool sleep {"seconds": 1.5}'


def test_incidents_list_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    node = open_node(data_dir, watchdog=WatchdogSection(run_stall_s=0.3, interval_s=0.1))
    runner = CliRunner()
    data = str(data_dir)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        assert runner.invoke(app, ["incidents", "list", "--data", data]).output == (
            "no open incidents\n"
        )
        run_id = node.start(STUCK)

        def listed() -> str | None:
            out = runner.invoke(app, ["incidents", "list", "--data", data]).output
            return out if run_id in out else None

        text = eventually(listed)
        assert text, "the open run incident"
        assert f"  run {run_id}  open for " in text
        assert "seconds_without_tape_entry" in text and "(limit 0.3)" in text
        as_json = json.loads(
            runner.invoke(app, ["incidents", "list", "--json", "--data", data]).output
        )
        (record,) = as_json
        assert (record["domain"], record["subject"], record["state"]) == ("run", run_id, "open")
        assert runner.invoke(
            app, ["incidents", "list", "--domain", "journal", "--data", data]
        ).output == ("no open incidents\n")

        agent = tmp_path / "agent.token"
        made = node.call("POST", "/v1/tokens", {"principal": "agent:app", "roles": ["agent"]})
        agent.write_text(made.json()["token"])
        refused = runner.invoke(
            app, ["incidents", "list", "--token-file", str(agent), "--data", data]
        )
        assert isinstance(refused.exception, CliError)
        assert "incident.read is not permitted" in str(refused.exception)

        node.finish(run_id)
        assert eventually(
            lambda: (
                "resolved cleared"
                in runner.invoke(app, ["incidents", "list", "--all", "--data", data]).output
            )
        )
        online = json.loads(
            runner.invoke(app, ["incidents", "list", "--all", "--json", "--data", data]).output
        )
    finally:
        close_node(node)

    offline = json.loads(
        runner.invoke(app, ["incidents", "list", "--all", "--json", "--data", data]).output
    )
    assert offline == online  # the journal's fold is the view
    assert runner.invoke(app, ["incidents", "list", "--data", data]).output == "no open incidents\n"
    bad = runner.invoke(app, ["incidents", "list", "--domain", "disk", "--data", data])
    assert isinstance(bad.exception, CliError) and "--domain must be one of" in str(bad.exception)
