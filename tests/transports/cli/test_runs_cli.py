"""``reel runs list | show | tape | cancel`` and ``reel sessions list | show | reset | branch`` as
an operator runs them: against the API of the node that holds the data dir (Cedar deciding
what the token may read), then on the stopped node's data dir (the journal folded by the views'
own ``apply``), which must answer the same; a fresh data dir answers "no runs"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from tests.transports.http.httpkit import HttpNode, close_node, open_node
from transports.cli.errors import CliError
from transports.cli.main import app

TOOL = 'listing\n/tool echo {"text": "tape-marker"}'
UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def run(data: Path, *args: str, token: str | None = None) -> Result:
    env = {"REEL_TOKEN": token} if token else None
    return CliRunner().invoke(app, [*args, "--data", str(data)], env=env)


def ok(data: Path, *args: str, token: str | None = None) -> str:
    result = run(data, *args, token=token)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def listed(data: Path, *args: str, token: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(ok(data, *args, "--json", token=token))
    return items


def code(result: Result) -> int:
    assert isinstance(result.exception, CliError), (result.output, result.exception)
    return result.exception.code


def agent_token(node: HttpNode) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": "agent:bot", "roles": ["agent"]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


def test_a_fresh_data_dir_has_no_runs_and_no_sessions(data_dir: Path) -> None:
    assert ok(data_dir, "runs", "list") == "no runs\n"
    assert ok(data_dir, "sessions", "list") == "no sessions\n"
    assert listed(data_dir, "runs", "list") == []
    missing = run(data_dir, "runs", "show", UNKNOWN)
    assert code(missing) == 2 and f"no run with id '{UNKNOWN}'" in str(missing.exception)
    assert code(run(data_dir, "runs", "tape", UNKNOWN)) == 2


def test_runs_and_sessions_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = open_node(data_dir)
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        alpha = node.session(session_key="alpha", label="first")
        beta = node.session(session_key="beta")
        first = node.start("hello there", alpha)
        node.finish(first)
        second = node.start(TOOL, alpha)
        node.finish(second)
        third = node.start("in beta", beta)
        node.finish(third)
        bot = agent_token(node)
        own = node.call("POST", "/v1/sessions", {}, auth=f"Bearer {bot}").json()["session_id"]
        bots = node.call(
            "POST", f"/v1/sessions/{own}/messages", {"text": "mine"}, auth=f"Bearer {bot}"
        ).json()["run_id"]
        node.finish(bots)

        every = [r["run_id"] for r in listed(data_dir, "runs", "list")]
        assert every == [first, second, third, bots]
        newest = listed(data_dir, "runs", "list", "--newest", "--limit", "2")
        assert [r["run_id"] for r in newest] == [bots, third]
        in_alpha = listed(data_dir, "runs", "list", "--session", alpha)
        assert [r["run_id"] for r in in_alpha] == [first, second]
        assert [r["run_id"] for r in listed(data_dir, "runs", "list", "--search", "IN BETA")] == [
            third
        ]
        done = listed(data_dir, "runs", "list", "--state", "done", "--principal", "agent:bot")
        assert [r["run_id"] for r in done] == [bots]
        # The agent's token reads only the runs of its own sessions (run.read by Cedar).
        assert [r["run_id"] for r in listed(data_dir, "runs", "list", token=bot)] == [bots]
        denied = run(data_dir, "runs", "show", first, token=bot)
        assert code(denied) == 3

        table = ok(data_dir, "runs", "list")
        assert "4 runs" in table and first in table and "agent:bot" in table
        shown = ok(data_dir, "runs", "show", second)
        assert f"run          {second}" in shown and "tool calls   1" in shown
        tape = ok(data_dir, "runs", "tape", second)
        assert '-> tool echo {"text":"tape-marker"}' in tape and "run done (" in tape
        online_tape = listed(data_dir, "runs", "tape", second)
        kinds = [e["kind"] for e in online_tape]
        assert kinds[0] == "run.accepted" and "tool.completed" in kinds

        ended = run(data_dir, "runs", "cancel", first)
        assert code(ended) == 1 and "nothing changed" in str(ended.exception)
        bad = run(data_dir, "runs", "list", "--session", "not-a-ulid")
        assert code(bad) == 2 and str(bad.exception).startswith("--session")

        sessions = listed(data_dir, "sessions", "list")
        assert [s["session_id"] for s in sessions] == [alpha, beta, own]
        assert [s["session_key"] for s in listed(data_dir, "sessions", "list", "--search", "alp")]
        assert ok(data_dir, "sessions", "show", alpha).splitlines()[1] == "key       alpha"
        reset = json.loads(ok(data_dir, "sessions", "reset", beta, "--json"))
        assert reset["resets"] == 1
        branched = json.loads(ok(data_dir, "sessions", "branch", alpha, "--run", first, "--json"))
        assert branched["parent_session_id"] == alpha
        assert branched["branched_from_run_id"] == first
        online = {
            "runs": listed(data_dir, "runs", "list"),
            "sessions": listed(data_dir, "sessions", "list"),
            "show": json.loads(ok(data_dir, "runs", "show", second, "--json")),
            "tape": listed(data_dir, "runs", "tape", second),
        }
    finally:
        close_node(node)

    # The node is stopped: the same answers, folded from the journal.
    assert listed(data_dir, "runs", "list") == online["runs"]
    assert listed(data_dir, "sessions", "list") == online["sessions"]
    assert json.loads(ok(data_dir, "runs", "show", second, "--json")) == online["show"]
    assert listed(data_dir, "runs", "tape", second) == online["tape"]
    assert [r["run_id"] for r in listed(data_dir, "runs", "list", "--search", "in beta")] == [third]
    offline_cancel = run(data_dir, "runs", "cancel", first)
    assert code(offline_cancel) == 2 and "no node runs" in str(offline_cancel.exception)
    offline_reset = run(data_dir, "sessions", "reset", beta)
    assert code(offline_reset) == 2 and "needs the running node" in str(offline_reset.exception)
