"""``reel usage`` through the running node's API (Cedar decides whose usage a token reads) and,
once the node has stopped, from the usage view's fold over the journal: the same report either
way; bad options exit 2 naming the option; a fresh data dir answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from projections.usage import Price
from tests.transports.http.httpkit import close_node, open_node
from transports.cli.errors import CliError
from transports.cli.main import app
from transports.config import ProviderConfig, UsageSection

CONFIG = """\
[provider]
model = "det-1"
[usage.prices."det-1"]
input_per_mtok = 1000000
output_per_mtok = 2000000
"""


def test_usage_online_then_offline(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    runner = CliRunner()
    data = str(data_dir)
    fresh = runner.invoke(app, ["usage", "--data", data])
    assert fresh.exit_code == 0, fresh.output
    assert "no usage recorded in these days" in fresh.output
    (data_dir / "config.toml").write_text(CONFIG)
    prices = {"det-1": Price(input_per_mtok=1_000_000, output_per_mtok=2_000_000)}
    node = open_node(
        data_dir, provider=ProviderConfig(model="det-1"), usage=UsageSection(prices=prices)
    )
    try:
        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        node.finish(node.start("hello there"))
        head = node.runtime.journal.head().position
        node.runtime.projector.wait_for(head, 10)
        online = {
            by: json.loads(
                runner.invoke(app, ["usage", "--by", by, "--json", "--data", data]).output
            )
            for by in ("principal", "session", "model")
        }
        text = runner.invoke(app, ["usage", "--by", "model", "--data", data]).output
        assert "det-1  tokens " in text and "total  tokens " in text
        agent = tmp_path / "agent.token"
        made = node.call("POST", "/v1/tokens", {"principal": "agent:app", "roles": ["agent"]})
        agent.write_text(made.json()["token"])
        theirs = runner.invoke(app, ["usage", "--json", "--token-file", str(agent), "--data", data])
        assert json.loads(theirs.output)["rows"] == []  # the admin's usage is not theirs
    finally:
        close_node(node)
    assert online["principal"]["rows"][0]["key"] == "admin"
    row = online["model"]["rows"][0]
    assert row["cost"] == row["input_tokens"] + 2 * row["output_tokens"]
    offline = {
        by: json.loads(runner.invoke(app, ["usage", "--by", by, "--json", "--data", data]).output)
        for by in ("principal", "session", "model")
    }
    assert offline == online  # the journal's fold is the view


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--by", "tool"], "--by must be one of principal, session, model"),
        (["--from", "2026-13-01"], "--from: '2026-13-01' is not a day"),
        (["--from", "2026-05-02", "--to", "2026-05-01"], "--from: 2026-05-02 is after to"),
    ],
)
def test_bad_options_name_the_option(data_dir: Path, args: list[str], words: str) -> None:
    result = CliRunner().invoke(app, ["usage", *args, "--data", str(data_dir)])
    assert isinstance(result.exception, CliError) and result.exception.code == 2
    assert words in str(result.exception)
