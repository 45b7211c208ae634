"""``reel status`` as an operator runs it: against a running node (its health, journal head,
views, live runs, pending approvals, incidents and task queue, as the node itself reports
them), and on a data dir no node holds (exit 1, the journal's head from the file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from events import JournalReader
from tests.transports.http.httpkit import SHELL, close_node, eventually, open_node
from transports.cli.main import app


def status(data: Path, *args: str) -> Result:
    return CliRunner().invoke(app, ["status", *args, "--data", str(data)])


def test_a_fresh_data_dir_has_no_node(data_dir: Path) -> None:
    result = status(data_dir)
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"node        not running on {data_dir}",
        "journal     head 0",
        "checkpoint  none signed yet",
    ]


def test_status_of_a_running_node_then_a_stopped_one(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = open_node(data_dir)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        node.finish(node.start("hello"))
        waiting = node.start(SHELL)
        eventually(
            lambda: node.call("GET", f"/v1/runs/{waiting}").json()["state"] == "awaiting_approval"
        )
        result = status(data_dir, "--json")
        assert result.exit_code == 0, result.output
        found = json.loads(result.output)
        head = node.call("GET", "/v1/journal/head").json()
        assert found["running"] is True and found["health"] == "ok"
        assert found["http"] == f"http://127.0.0.1:{node.server.port}"
        assert found["journal_position"] >= head["position"] > 0
        assert found["runs"]["done"] == 1 and found["runs"]["awaiting_approval"] == 1
        assert found["approvals_pending"] == 1
        assert found["views_behind"] >= 0 and 0 <= found["uptime_s"] < 86_400
        assert set(found["tasks"]) >= {"queued", "running", "retrying"}
        text = status(data_dir).output
        assert "runs        1 live (accepted 0, in_progress 0, awaiting_approval 1)" in text
        assert "approvals   1 pending" in text and "incidents   0 open" in text
    finally:
        close_node(node)

    stopped = status(data_dir, "--json")
    assert stopped.exit_code == 1
    found = json.loads(stopped.output)
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        assert found["journal_position"] == reader.head().position
        assert found["journal_hash"] == reader.head().hash.hex()
    finally:
        reader.close()
    assert found["running"] is False and found["runs"] == {}
