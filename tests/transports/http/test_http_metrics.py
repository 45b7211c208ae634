"""/metrics: Prometheus text that prometheus_client's parser reads back."""

from __future__ import annotations

import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from tests.transports.http.httpkit import SHELL, HttpNode, close_node, open_node
from transports.build import version
from transports.config import ViewsSection
from transports.http.metrics import histogram_lines


def families(node: HttpNode) -> dict[str, Any]:
    reply = node.call("GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: f for f in text_string_to_metric_families(reply.body.decode())}


def value(family: Any, name: str, **labels: str) -> float:
    for sample in family.samples:
        if sample.name == name and sample.labels == labels:
            return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")


def test_metrics_read_back_with_prometheus_client(node: HttpNode) -> None:
    node.finish(node.start("one"))
    shell = node.start(SHELL)
    stream, _ = node.until(shell, "run.awaiting_approval")
    stream.close()
    metrics = families(node)

    runs = metrics["reel_runs"]
    assert runs.type == "gauge"
    assert value(runs, "reel_runs", state="done") == 1
    assert value(runs, "reel_runs", state="awaiting_approval") == 1
    assert value(runs, "reel_runs", state="failed") == 0

    appended = metrics["reel_events_appended"]  # the parser drops the _total suffix
    assert appended.type == "counter"
    committed = node.runtime.journal.committed_position
    assert value(appended, "reel_events_appended_total") == committed

    latency = metrics["reel_append_latency_seconds"]
    assert latency.type == "histogram"
    buckets = [s for s in latency.samples if s.name.endswith("_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts)  # cumulative
    assert buckets[-1].labels["le"] == "+Inf"
    count = value(latency, "reel_append_latency_seconds_count")
    assert counts[-1] == count >= 1
    assert value(latency, "reel_append_latency_seconds_sum") > 0

    assert value(metrics["reel_approvals_pending"], "reel_approvals_pending") == 1
    lag = value(metrics["reel_projection_lag_events"], "reel_projection_lag_events")
    assert 0 <= lag <= node.runtime.journal.committed_position
    assert value(metrics["reel_http_sse_streams"], "reel_http_sse_streams") in (0, 1)


def test_a_burst_of_reads_holds_at_most_the_configured_view_connections(data_dir: Path) -> None:
    node = open_node(data_dir, views=ViewsSection(readers=2))
    try:
        node.finish(node.start("one"))
        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(lambda _: node.call("GET", "/v1/runs").status, range(64)))
        assert statuses == [200] * 64
        metrics = families(node)
        connections = metrics["reel_views_connections"]
        for reader in ("views", "memory", "incidents", "learning", "http"):
            assert 0 <= value(connections, "reel_views_connections", reader=reader) <= 2
        assert value(connections, "reel_views_connections", reader="http") >= 1
        threads = value(metrics["reel_process_threads"], "reel_process_threads")
        assert threads >= 2  # the event loop thread and the actors at least
        fds = value(metrics["reel_process_open_fds"], "reel_process_open_fds")
        assert fds >= 3 + connections_open(metrics)
    finally:
        close_node(node)


def connections_open(metrics: dict[str, Any]) -> int:
    return int(sum(s.value for s in metrics["reel_views_connections"].samples))


def test_build_info_names_the_version(node: HttpNode) -> None:
    info = families(node)["reel_build_info"]
    assert info.type == "gauge"
    assert [(s.labels, s.value) for s in info.samples] == [({"version": version()}, 1)]


class HistogramSnapshot(msgspec.Struct, frozen=True):
    buckets: tuple[tuple[float, int], ...]
    sum_s: float
    count: int


def test_histogram_text_adds_inf_when_the_source_has_none() -> None:
    lines = histogram_lines("h", "help", HistogramSnapshot(((0.5, 1), (1.0, 3)), 1.25, 4))
    text = "\n".join(lines) + "\n"
    (family,) = text_string_to_metric_families(text)
    samples = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert samples == {
        ("h_bucket", "0.5"): 1,
        ("h_bucket", "1.0"): 3,
        ("h_bucket", "+Inf"): 4,
        ("h_sum", None): 1.25,
        ("h_count", None): 4,
    }


def test_the_start_time_is_the_process_start_ps_reports(node: HttpNode) -> None:
    started = value(
        families(node)["reel_process_start_time_seconds"], "reel_process_start_time_seconds"
    )
    shown = subprocess.run(
        ["ps", "-o", "lstart=", "-p", str(os.getpid())],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LC_ALL": "C", "TZ": "UTC"},
    ).stdout.strip()
    by_ps = datetime.strptime(shown, "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC).timestamp()
    assert abs(started - by_ps) <= 2.0 and started <= time.time()
