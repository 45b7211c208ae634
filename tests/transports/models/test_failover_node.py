"""A real node configured with ``[[providers]]`` whose endpoints are loopback servers speaking the
OpenAI and Anthropic wire protocols: runs fail over, record the endpoint and model that
answered, fail ``provider_unavailable`` when every endpoint is down (and fast after that, with no
request to a dead endpoint), and the circuits show in ``/metrics``, ``GET /v1/providers``,
``reel status`` and ``reel providers``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from typer.testing import CliRunner

from events.catalog import AccessDecided
from tests.transports.cli.nodekit import bare_environment, reel
from tests.transports.http.httpkit import HttpNode, close_node, open_node
from tests.transports.models.conftest import FakeAnthropic, FakeOpenAI, ScriptedReply
from tools.handles import VaultHandle
from transports.cli.main import app
from transports.models.endpoints import EndpointConfig

DOWN = ScriptedReply(status=503, body=b'{"error": {"message": "overloaded"}}')


@pytest.fixture
def second_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def openai(name: str, server: FakeOpenAI, **options: Any) -> EndpointConfig:
    return EndpointConfig(
        kind="openai",
        name=name,
        base_url=server.base_url,
        model="m-" + name,
        backoff_base_s=0.001,
        **options,
    )


def events_of(node: HttpNode, text: str) -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for event in node.finish(node.start(text)):
        if event.event and event.data:
            by_kind.setdefault(event.event, []).append(event.entry["event"])
    return by_kind


def cli(data_dir: Path, *args: str) -> Result:
    return CliRunner().invoke(app, [*args, "--data", str(data_dir)])


def test_a_run_fails_over_and_records_the_endpoint_and_model(
    data_dir: Path, fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    fake_openai.always = DOWN
    node = open_node(
        data_dir,
        providers=[
            openai("primary", fake_openai),
            EndpointConfig(
                kind="anthropic", name="claude", base_url=fake_anthropic.base_url, model="c-1"
            ),
        ],
    )
    try:
        by_kind = events_of(node, "hello over there")
    finally:
        close_node(node)

    (completed,) = by_kind["run.completed"]
    assert completed["answer"] == "hello over there"
    (turn,) = by_kind["run.turn_completed"]
    assert turn["endpoint"] == "claude" and turn["model"] == "claude-test"
    # The run's turn: three attempts at the dead endpoint, then Claude; what the node asks the
    # model after the run (reflection) skips the open circuit and goes to Claude too.
    assert len(fake_openai.requests) == 3 and fake_anthropic.requests


def test_every_endpoint_down_fails_runs_unavailable_then_fast_without_requests(
    data_dir: Path,
    fake_openai: FakeOpenAI,
    second_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_openai.always = second_openai.always = DOWN
    node = open_node(
        data_dir,
        providers=[
            openai("a", fake_openai, cooldown_s=3600),
            openai("b", second_openai, cooldown_s=3600),
        ],
    )
    try:
        first = events_of(node, "hello")["run.failed"][0]
        assert first["reason"] == "provider_unavailable"
        assert "a: provider returned 503" in first["message"]
        assert (len(fake_openai.requests), len(second_openai.requests)) == (3, 3)

        for _ in range(3):
            again = events_of(node, "hello")["run.failed"][0]
            assert again["reason"] == "provider_unavailable"
            assert "circuit open" in again["message"]
        assert (len(fake_openai.requests), len(second_openai.requests)) == (3, 3)

        metrics = node.call("GET", "/metrics").body.decode()
        assert 'reel_provider_circuit{endpoint="a",state="open"} 1' in metrics
        assert 'reel_provider_circuit{endpoint="a",state="closed"} 0' in metrics
        assert 'reel_provider_attempts_total{endpoint="b",outcome="failure"} 3' in metrics
        listed = node.call("GET", "/v1/providers").json()["items"]
        assert [(e["name"], e["state"], e["consecutive_failures"]) for e in listed] == [
            ("a", "open", 3),
            ("b", "open", 3),
        ]
        assert all(0 < e["retry_in_s"] <= 3600 for e in listed)

        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        status = cli(data_dir, "status", "--json")
        assert status.exit_code == 0, status.output
        assert json.loads(status.output)["providers"] == {"a": "open", "b": "open"}
        assert "providers   a open, b open" in cli(data_dir, "status").output
    finally:
        close_node(node)


def test_providers_test_through_the_node_reports_latency_and_model(
    data_dir: Path,
    fake_openai: FakeOpenAI,
    fake_anthropic: FakeAnthropic,
    second_openai: FakeOpenAI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    second_openai.always = ScriptedReply(status=401, body=b'{"error": {"message": "bad key"}}')
    node = open_node(
        data_dir,
        providers=[
            openai("gpt", fake_openai),
            EndpointConfig(
                kind="anthropic", name="claude", base_url=fake_anthropic.base_url, model="c-1"
            ),
            openai("broken", second_openai),
        ],
    )
    try:
        reply = node.call("POST", "/v1/providers/test", {})
        assert reply.status == 200, reply
        items = {item["name"]: item for item in reply.json()["items"]}
        assert items["gpt"]["ok"] and items["gpt"]["model"] == "gpt-test"
        assert items["claude"]["ok"] and items["claude"]["model"] == "claude-test"
        assert not items["broken"]["ok"] and "401" in items["broken"]["error"]
        assert all(item["latency_ms"] > 0 for item in items.values())
        assert items["broken"]["state"] == "closed"  # a test leaves the circuits alone
        assert fake_anthropic.requests[0].body["max_tokens"] == 8

        monkeypatch.setenv("REEL_HTTP_PORT", str(node.server.port))
        result = cli(data_dir, "providers", "test")
        assert result.exit_code == 1, result.output  # one endpoint failed
        lines = result.output.splitlines()
        assert lines[0].startswith("gpt  openai  ") and lines[0].endswith("model gpt-test  ok")
        assert (
            lines[2].startswith("broken  openai  ") and "FAILED: provider returned 401" in lines[2]
        )
    finally:
        close_node(node)


def test_providers_test_without_a_node_builds_the_endpoints_from_config(
    data_dir: Path, fake_anthropic: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-" + "t3st" * 8)
    (data_dir / "config.toml").write_text(
        "[[providers]]\n"
        'kind = "anthropic"\n'
        'name = "claude"\n'
        f'base_url = "{fake_anthropic.base_url}"\n'
        'model = "c-1"\n'
        'api_key_env = "TEST_ANTHROPIC_KEY"\n'
    )

    result = cli(data_dir, "providers", "test", "--json")

    assert result.exit_code == 0, result.output
    (item,) = json.loads(result.output)
    assert item["name"] == "claude" and item["ok"] and item["model"] == "claude-test"
    assert fake_anthropic.requests[0].headers["x-api-key"] == "sk-ant-" + "t3st" * 8
    assert not (data_dir / "journal.db").exists()  # nothing recorded
    listed = cli(data_dir, "providers", "list")
    assert listed.exit_code == 0 and listed.output.startswith("claude  anthropic  c-1  no node")


def test_a_fresh_data_dir_on_the_default_provider_has_no_endpoint(data_dir: Path) -> None:
    for command in ("list", "test"):
        result = cli(data_dir, "providers", command)
        assert result.exit_code == 0, result.output
        assert result.output.startswith("the deterministic provider alone")


def test_bad_providers_config_is_exit_2_naming_the_key(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text(
        '[[providers]]\nkind = "anthropic"\nmodel = "c"\napi_key = "sk-ant-pasted-here"\n'
    )
    done = reel("providers", "list", "--data", str(data_dir), env=bare_environment())
    assert done.returncode == 2, done
    assert "config key providers[0].api_key: the key is never written in config" in done.stderr
    assert "sk-ant-pasted-here" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_a_vault_key_naming_no_secret_stops_the_node_naming_the_key(
    data_dir: Path, fake_anthropic: FakeAnthropic
) -> None:
    from transports.config import ConfigError

    claude = EndpointConfig(
        kind="anthropic",
        name="claude",
        base_url=fake_anthropic.base_url,
        model="c-1",
        api_key=VaultHandle(vault="anthropic_key"),
    )
    with pytest.raises(ConfigError, match=r"providers\[0\]\.api_key: the vault holds no secret"):
        open_node(data_dir, providers=[claude])


def test_only_admins_test_providers_and_each_decision_is_journaled(
    data_dir: Path, fake_openai: FakeOpenAI
) -> None:
    node = open_node(data_dir, providers=[openai("gpt", fake_openai)])
    try:
        made = node.call("POST", "/v1/tokens", {"principal": "user:op", "roles": ["operator"]})
        operator = f"Bearer {made.json()['token']}"
        refused = node.call("POST", "/v1/providers/test", {}, auth=operator)
        assert refused.status == 403 and "provider.test" in refused.error["message"], refused
        assert fake_openai.requests == []  # refused before any request
        assert node.call("GET", "/v1/providers", auth=operator).status == 200  # node.read
        assert node.call("POST", "/v1/providers/test", {}).status == 200
        decided = [
            (row.principal, event.outcome)
            for row in node.runtime.journal.events_of_kinds(("access.decided",))
            if isinstance(event := row.decode(), AccessDecided) and event.action == "provider.test"
        ]
        assert decided == [("user:op", "deny"), ("admin", "allow")]
    finally:
        close_node(node)
