"""``[telemetry]``: a bad endpoint or bound is refused naming its key (never quoting a password
in the URL), where spans are posted, and the extra named when the SDK is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.transports.cli.nodekit import environment, reel
from transports.config import ConfigError, TelemetryConfig, load_config
from transports.telemetry import open_tracer

SECRET = "TelemetryPw9x"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://collector:4318", "must be an http:// or https:// URL with a host"),
        ("collector:4318", "must be an http:// or https:// URL with a host"),
        ("http://", "must be an http:// or https:// URL with a host"),
        (f"http://bob:{SECRET}@collector:4318", "must not hold credentials"),
        ("http://collector:99999", "not a URL"),
        ("http://collector:4318/?token=x", "must have no query or fragment"),
    ],
)
def test_a_bad_endpoint_is_refused_naming_the_key(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"REEL_TELEMETRY_OTLP_ENDPOINT": url})
    message = str(caught.value)
    assert message.startswith("REEL_TELEMETRY_OTLP_ENDPOINT (config key telemetry.otlp_endpoint)")
    assert problem in message and SECRET not in message


def test_bounds_are_refused_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[telemetry]\nmax_queue_spans = 8\nmax_batch_spans = 9\n")
    with pytest.raises(ConfigError, match=r"config key telemetry.max_batch_spans: must not exceed"):
        load_config(config, {})
    for key, value in (("timeout_s", "0"), ("max_queue_spans", "0"), ("service_name", '""')):
        config.write_text(f"[telemetry]\n{key} = {value}\n")
        with pytest.raises(ConfigError, match=rf"config key telemetry.{key}: "):
            load_config(config, {})


def test_reel_node_refuses_a_bad_endpoint_with_one_line_and_exit_2(data_dir: Path) -> None:
    env = environment(REEL_TELEMETRY_OTLP_ENDPOINT=f"ftp://bob:{SECRET}@collector")
    done = reel("node", "--data", str(data_dir), env=env)
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert line.startswith("reel: error: ") and "telemetry.otlp_endpoint" in line, line
    assert SECRET not in line


def test_spans_go_to_the_endpoints_v1_traces() -> None:
    def url(endpoint: str) -> str:
        return TelemetryConfig(otlp_endpoint=endpoint).traces_url

    assert url("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/traces"
    assert url("http://127.0.0.1:4318/") == "http://127.0.0.1:4318/v1/traces"
    assert url("https://otel.example/otlp") == "https://otel.example/otlp/v1/traces"
    assert url("http://h:4318/v1/traces") == "http://h:4318/v1/traces"


def test_no_endpoint_is_no_tracer_and_a_missing_sdk_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert open_tracer(TelemetryConfig()) is None
    monkeypatch.delitem(sys.modules, "transports.telemetry.otlp", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    with pytest.raises(ConfigError) as caught:
        open_tracer(TelemetryConfig(otlp_endpoint="http://127.0.0.1:4318"))
    assert "config key telemetry.otlp_endpoint" in str(caught.value)
    assert "pip install 'reel[telemetry]'" in str(caught.value)
