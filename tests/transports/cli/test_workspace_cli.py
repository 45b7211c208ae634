"""``reel workspace checkpoints | diff | restore`` as a user runs them: through the API of the
node that holds the data dir, then on the stopped node's data dir (the journal and the
checkpoint store read by the CLI itself; a restore refused), and on a fresh data dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.transports.http.httpkit import close_node, open_node
from tests.transports.http.test_http_workspace import write
from transports.cli.errors import CliError
from transports.cli.main import app

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def test_workspace_commands_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    data = str(data_dir)
    node = open_node(data_dir)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        workspace = node.runtime.node.services.workspace
        write(node, "a.txt", "one\n")
        write(node, "a.txt", "two\n")
        listed = runner.invoke(app, ["workspace", "checkpoints", "--data", data, "--json"])
        assert listed.exit_code == 0, listed.output
        newest, oldest = json.loads(listed.output)
        diff = runner.invoke(app, ["workspace", "diff", oldest["checkpoint_id"], "--data", data])
        assert diff.exit_code == 0, diff.output
        assert "-one\n+two\n" in diff.output
        restored = runner.invoke(
            app, ["workspace", "restore", oldest["checkpoint_id"], "--data", data]
        )
        assert restored.exit_code == 0, restored.output
        assert "1 file changed" in restored.output
        assert (workspace / "a.txt").read_text() == "one\n"
        unknown = runner.invoke(app, ["workspace", "restore", UNKNOWN, "--data", data])
        assert isinstance(unknown.exception, CliError) and unknown.exit_code != 0
    finally:
        close_node(node)
    text = runner.invoke(app, ["workspace", "checkpoints", "--data", data])
    assert text.exit_code == 0, text.output
    lines = text.output.splitlines()
    assert len(lines) == 3 and f"restore of {oldest['checkpoint_id']}" in lines[0]
    assert "fs.write in run" in lines[2] and "a.txt" in lines[2]
    offline = runner.invoke(app, ["workspace", "diff", newest["checkpoint_id"], "--data", data])
    assert offline.exit_code == 0 and "-two\n+one\n" in offline.output
    refused = runner.invoke(app, ["workspace", "restore", newest["checkpoint_id"], "--data", data])
    assert isinstance(refused.exception, CliError)
    assert "needs the running node" in str(refused.exception)
    missing = runner.invoke(app, ["workspace", "diff", UNKNOWN, "--data", data])
    assert isinstance(missing.exception, CliError)
    assert "no workspace checkpoint" in str(missing.exception)


def test_a_fresh_data_dir_has_no_checkpoints(data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["workspace", "checkpoints", "--data", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert result.output == "no workspace checkpoints yet (no call has changed a workspace file)\n"
