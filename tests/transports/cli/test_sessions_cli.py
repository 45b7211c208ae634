"""``reel sessions compact | checkpoints | restore`` as a user runs them: through the API of the
node that holds the data dir (with a token, Cedar deciding), then on the stopped node's data
dir (the journal folded by the CLI itself, a restore appended as ``cli``), and ``reel replay``
still identical."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from actors.messages import GetSessionState
from events import JournalReader
from tests import processes
from tests.transports.http.httpkit import HttpNode, close_node, open_node
from transports.cli.errors import EXIT_DENIED, CliError
from transports.cli.main import app
from transports.config import ContextSection
from transports.runtime import open_runtime

REEL = str(Path(sys.executable).with_name("reel"))
UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
MANUAL = ContextSection(budget_tokens=600, compact_at=0.0)


def reel(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [REEL, *args, "--data", str(data)], capture_output=True, text=True, timeout=60
    )


def _code(result: object) -> int:
    exc = getattr(result, "exception", None)
    assert isinstance(exc, CliError), result
    return exc.code


def talk(node: HttpNode, session_id: str, text: str) -> str:
    run_id = node.start(text, session_id)
    node.finish(run_id)
    return run_id


def test_sessions_commands_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    node = open_node(data_dir, context=MANUAL)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        data = str(data_dir)
        runner = CliRunner()
        sid = node.session()
        first_run = talk(node, sid, "Where is the key? It was here yesterday.")

        compacted = runner.invoke(app, ["sessions", "compact", sid, "--data", data])
        assert compacted.exit_code == 0, compacted.output
        listing = json.loads(
            runner.invoke(app, ["sessions", "checkpoints", sid, "--json", "--data", data]).output
        )
        (first,) = listing["items"]
        assert listing["in_force"] == first["checkpoint_id"] and first["covers"] == [first_run]
        assert compacted.output.startswith(
            f"session {sid}: condensed 1 run into checkpoint {first['checkpoint_id']} "
            "(extractive; history ~"
        )
        nothing = runner.invoke(app, ["sessions", "compact", sid, "--data", data])
        assert _code(nothing) == 1 and "nothing changed" in str(nothing.exception)
        talk(node, sid, "And the door?")
        assert runner.invoke(app, ["sessions", "compact", sid, "--data", data]).exit_code == 0

        text = runner.invoke(app, ["sessions", "checkpoints", sid, "--data", data]).output
        lines = text.splitlines()
        assert lines[0].startswith(f"  {first['checkpoint_id']}  ")
        assert "request, extractive, by admin" in lines[0]
        assert lines[1] == f"    covers 1 run; history 1 runs; ~{first['tokens_before']} -> " + (
            f"~{first['tokens_after']} tokens"
        )
        assert lines[2].startswith("* ") and "covers 2 runs (" in lines[3]

        unknown = runner.invoke(app, ["sessions", "restore", sid, UNKNOWN, "--data", data])
        assert _code(unknown) == 2
        assert str(unknown.exception) == (
            f"checkpoint: session {sid} has no checkpoint '{UNKNOWN}' (2 checkpoints)"
        )
        malformed = runner.invoke(app, ["sessions", "restore", sid, "nope", "--data", data])
        assert _code(malformed) == 2 and str(malformed.exception).startswith("checkpoint")

        viewer = tmp_path_factory.mktemp("t") / "viewer.token"
        made = node.call("POST", "/v1/tokens", {"principal": "user:vic", "roles": ["viewer"]})
        viewer.write_text(made.json()["token"])
        as_viewer = ["--token-file", str(viewer), "--data", data]
        refused = runner.invoke(app, ["sessions", "compact", sid, *as_viewer])
        assert _code(refused) == EXIT_DENIED and "session.compact" in str(refused.exception)
        refused = runner.invoke(
            app, ["sessions", "restore", sid, first["checkpoint_id"], *as_viewer]
        )
        assert _code(refused) == EXIT_DENIED and "session.restore" in str(refused.exception)
        assert runner.invoke(app, ["sessions", "checkpoints", sid, *as_viewer]).exit_code == 0
    finally:
        close_node(node)

    # No node: the CLI folds the journal itself, and appends a restore as `cli`.
    offline = reel(data_dir, "sessions", "checkpoints", sid, "--json")
    assert offline.returncode == 0, offline.stderr
    assert len(json.loads(offline.stdout)["items"]) == 2
    no_node = reel(data_dir, "sessions", "compact", sid)
    assert no_node.returncode == 2 and no_node.stdout == ""
    assert no_node.stderr.startswith("reel: error: compaction needs the running node")
    bad = reel(data_dir, "sessions", "restore", sid, UNKNOWN)
    assert bad.returncode == 2
    assert bad.stderr == (
        f"reel: error: checkpoint: session {sid} has no checkpoint '{UNKNOWN}' (2 checkpoints)\n"
    )
    missing = reel(data_dir, "sessions", "checkpoints", UNKNOWN)
    assert (missing.returncode, missing.stderr) == (
        2,
        f"reel: error: no session with id '{UNKNOWN}'\n",
    )
    restored = reel(data_dir, "sessions", "restore", sid, first["checkpoint_id"])
    assert restored.returncode == 0, restored.stderr
    assert "recorded by cli" in restored.stdout
    listed = json.loads(reel(data_dir, "sessions", "checkpoints", sid, "--json").stdout)
    assert listed["in_force"] == first["checkpoint_id"]

    reader = JournalReader.open(data_dir / "journal.db")
    try:
        last = reader.read_stream(f"session/{sid}")[-1]
    finally:
        reader.close()
    assert (last.kind, last.principal) == ("session.restored", "cli")

    replay = reel(data_dir, "replay")
    assert replay.returncode == 0, replay
    assert "views identical to a replay from position 0" in replay.stdout

    # The node folds the offline restore like any other event.
    runtime = open_runtime(data_dir)
    try:
        state = runtime.node.ask(GetSessionState(session_id=sid))
    finally:
        runtime.close(1.0)
    assert state.compaction.compaction_id == first["checkpoint_id"]
    assert state.history == (first_run,)
