"""Issue 26, traces: a run's OpenTelemetry spans, as a real node exports them over OTLP/HTTP to a
collector on loopback (tests/transports/telemetry/collector.py parses each request with
opentelemetry-proto's classes).

- A run whose tool call waits for a human is one trace: the run's root span, its context
  assembly with the memory search in it, each model turn, each tool call with its decision,
  approval wait and execution, parents linked and every child inside its parent's time.
- Text planted in the message, a tool's arguments, its output, a memory item and a made-up
  tool name reaches no byte the collector receives (while it is on the journal).
- A collector that never answers, or refuses connections, costs runs nothing: they complete
  while the export waits, and what waits is bounded by ``max_queue_spans``.
- Without ``otlp_endpoint`` nothing is sent, even with the ``OTEL_*`` endpoint variables set,
  and the SDK is not imported.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from actors.tracing import trace_id
from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node, eventually
from tests.transports.telemetry.collector import Collected, OtlpCollector
from transports.config import HttpConfig, NodeConfig, TelemetryConfig, ToolsSection
from transports.http import start_http
from transports.runtime import open_runtime

REPO = Path(__file__).resolve().parents[3]

CANARIES = {
    "message": "TraceCanaryMsg1",
    "arguments": "TraceCanaryArg2",
    "output": "TraceCanaryOut3",
    "tool name": "TraceCanaryTool4",
    "memory": "TraceCanaryMem5",
}
FILE = f"{CANARIES['arguments']}.txt"
MESSAGE = (
    f"deploys {CANARIES['message']} checklist\n"
    f'/tool fs.read {{"path": "{FILE}"}}\n'
    f'/tool {CANARIES["tool name"]} {{"x": "{CANARIES["arguments"]}"}}'
)
"""One turn proposing two calls: ``fs.read`` (asked of a human: posture ``ask_each_time``) of a
file whose name and content are canaries, and a tool nobody has, named by a canary."""


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    server = OtlpCollector()
    server.start()
    try:
        yield server
    finally:
        server.release()
        server.stop()


def traced_node(data_dir: Path, endpoint: str, **telemetry: Any) -> HttpNode:
    """A node serving HTTP that exports its runs' spans to ``endpoint`` (every 50 ms unless
    ``telemetry`` says otherwise), with the canary file in its workspace and ``fs.read`` asked
    of a human."""
    (data_dir / "workspace").mkdir(parents=True, exist_ok=True)
    (data_dir / "workspace" / FILE).write_text(f"the file says {CANARIES['output']}\n")
    settings = {"export_every_s": 0.05, **telemetry}
    config = NodeConfig(
        http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
        tools=ToolsSection(postures={"fs.read": "ask_each_time"}),
        telemetry=TelemetryConfig(otlp_endpoint=endpoint, **settings),
    )
    runtime = open_runtime(data_dir, config=config)
    try:
        server = start_http(runtime, keepalive_s=15)
    except BaseException:
        runtime.close(1.0)
        raise
    token = (data_dir / "admin.token").read_text().strip()
    return HttpNode(runtime=runtime, server=server, token=token)


def tape(node: HttpNode, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()[
        "items"
    ]
    return items


def of_trace(collector: OtlpCollector, run_id: str) -> list[Collected]:
    return [s for s in collector.spans() if s.trace_id == trace_id(run_id)]


def run_with_approval(
    node: HttpNode, collector: OtlpCollector, session_id: str | None = None
) -> tuple[str, str]:
    """The canary run, its approval allowed once it is asked; returns the run's and the
    approval's ids once the run's root span has reached the collector."""
    run_id = node.start(MESSAGE, session_id)
    approval_id = node.pending_approval(run_id)
    reply = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
    assert reply.status == 200, reply
    node.finish(run_id)
    assert eventually(
        lambda: any(s.name == "reel.run" for s in of_trace(collector, run_id)), timeout=30
    ), f"no root span of run {run_id} reached the collector"
    return run_id, approval_id


def test_a_run_with_a_tool_call_behind_an_approval_is_one_trace(
    data_dir: Path, collector: OtlpCollector
) -> None:
    node = traced_node(data_dir, collector.base)
    try:
        session_id = node.session()
        run_id, approval_id = run_with_approval(node, collector, session_id)
        entries = tape(node, run_id)
    finally:
        close_node(node)
    spans = of_trace(collector, run_id)
    assert collector.content_types and set(collector.content_types) == {"application/x-protobuf"}
    assert not collector.other_paths

    # One trace, derived from the run: its id is the run's ULID.
    assert trace_id(run_id) == int(ULID.from_str(run_id))
    assert {s.trace_id for s in collector.spans()} == {trace_id(run_id)}
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans), "a span was exported twice or two spans share an id"
    names = sorted(s.name for s in spans)
    assert names == sorted(
        [
            "reel.run",
            "reel.context",
            "reel.memory.search",
            "reel.turn",
            "reel.turn",
            "reel.tool fs.read",
            "reel.tool.decision",
            "reel.tool.approval",
            "reel.tool.execute",
            "reel.tool unknown",
        ]
    ), names

    # The tree: one root, every parent exported, every child inside its parent's time.
    (root,) = [s for s in spans if s.parent_id is None]
    assert root.name == "reel.run"

    def parent(span: Collected) -> Collected:
        assert span.parent_id is not None
        return by_id[span.parent_id]

    for span in spans:
        assert span.start_ns <= span.end_ns, span.name
        if span is root:
            continue
        up = parent(span)
        assert up.start_ns <= span.start_ns and span.end_ns <= up.end_ns, (span.name, up.name)
    expected_parent = {
        "reel.context": "reel.run",
        "reel.memory.search": "reel.context",
        "reel.turn": "reel.run",
        "reel.tool fs.read": "reel.run",
        "reel.tool unknown": "reel.run",
        "reel.tool.decision": "reel.tool fs.read",
        "reel.tool.approval": "reel.tool fs.read",
        "reel.tool.execute": "reel.tool fs.read",
    }
    for span in spans:
        if span is not root:
            assert parent(span).name == expected_parent[span.name], span.name

    # What the spans say, checked against the journal.
    kinds = {e["kind"]: e for e in entries}
    assert kinds["run.completed"]["event"]["turns"] == 2
    assert root.attributes["reel.run_id"] == run_id
    assert root.attributes["reel.session_id"] == session_id
    assert root.attributes["reel.principal"] == "admin"
    assert root.attributes["reel.run.status"] == "done"
    assert root.attributes["reel.run.reason"] == "final_answer"
    assert root.attributes["reel.run.turns"] == 2
    assert root.attributes["reel.run.tool_calls"] == 2
    assert root.attributes["reel.message.bytes"] == len(MESSAGE.encode())
    assert root.status_code == 0
    assert root.resource["service.name"] == "reel"
    assert root.scope == "reel"
    turns = sorted((s for s in spans if s.name == "reel.turn"), key=lambda s: s.start_ns)
    assert [t.attributes["reel.turn"] for t in turns] == [1, 2]
    assert [t.attributes["reel.turn.tool_calls"] for t in turns] == [2, 0]
    assert turns[0].attributes["reel.turn.finish_reason"] == "tool_calls"
    completed_turns = [e["event"] for e in entries if e["kind"] == "run.turn_completed"]
    assert [t.attributes["gen_ai.usage.input_tokens"] for t in turns] == [
        t["prompt_tokens"] for t in completed_turns
    ]
    assert all(t.kind == 3 for t in turns)  # SPAN_KIND_CLIENT: a call to the model

    (call,) = [s for s in spans if s.name == "reel.tool fs.read"]
    requested = next(e for e in entries if e["kind"] == "tool.approval_requested")
    resolved = next(e for e in entries if e["kind"] == "tool.approval_resolved")
    assert call.attributes["gen_ai.tool.name"] == "fs.read"
    assert call.attributes["reel.tool.decision"] == "approval_required"
    assert call.attributes["reel.approval_id"] == approval_id
    assert call.attributes["reel.invocation_id"] == requested["event"]["invocation_id"]
    assert call.attributes["reel.tool.ok"] is True
    assert call.attributes["reel.tool.output_bytes"] > 0
    (decision,) = [s for s in spans if s.name == "reel.tool.decision"]
    assert decision.attributes["reel.tool.decision"] == "approval_required"
    assert decision.attributes["reel.tool.posture"] == "ask_each_time"
    (wait,) = [s for s in spans if s.name == "reel.tool.approval"]
    assert wait.attributes["reel.approval_id"] == approval_id
    assert wait.attributes["reel.approval.decision"] == "allow"
    assert wait.attributes["reel.approval.decided_by"] == "admin"
    # The wait began once the request was on the journal and ended once the decision was.
    assert wait.start_ns >= requested["recorded_at_ms"] * 1_000_000
    assert wait.end_ns >= resolved["recorded_at_ms"] * 1_000_000
    assert decision.end_ns <= wait.start_ns
    (execute,) = [s for s in spans if s.name == "reel.tool.execute"]
    assert wait.end_ns <= execute.start_ns
    (unknown,) = [s for s in spans if s.name == "reel.tool unknown"]
    assert unknown.attributes["gen_ai.tool.name"] == "unknown"
    assert unknown.attributes["reel.tool.decision"] == "deny"
    assert unknown.status_code == 2 and unknown.attributes["error.type"] == "unknown_tool"


def test_no_planted_text_reaches_any_exported_byte(
    data_dir: Path, collector: OtlpCollector
) -> None:
    node = traced_node(data_dir, collector.base)
    try:
        memory = f"deploys checklist: {CANARIES['memory']} before friday"
        written = node.call("POST", "/v1/memory", {"text": memory, "scope": "global"})
        assert written.status == 201, written
        run_id, _ = run_with_approval(node, collector)
        entries = json.dumps(tape(node, run_id))
        spans = of_trace(collector, run_id)
    finally:
        close_node(node)
    # Planted for real: each canary is on the run's tape (the memory one as injected).
    for where, canary in CANARIES.items():
        assert canary in entries, f"the {where} canary is not on the tape"
    (context,) = [s for s in spans if s.name == "reel.context"]
    assert context.attributes["reel.context.memory_items"] == 1
    assert collector.requests() > 0
    for i, body in enumerate(collector.bodies):
        for where, canary in CANARIES.items():
            assert canary.encode() not in body, f"the {where} canary is in request {i}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_a_collector_that_refuses_connections_costs_runs_nothing(data_dir: Path) -> None:
    node = traced_node(data_dir, f"http://127.0.0.1:{closed_port()}", timeout_s=1.0)
    try:
        for _ in range(3):
            run_id = node.start("hello there")
            (end,) = [e for e in node.finish(run_id) if e.event in {"run.completed", "run.failed"}]
            assert end.event == "run.completed", end.data
    finally:
        close_node(node)


def test_a_collector_that_never_answers_costs_runs_nothing_and_queues_at_most_its_bound(
    data_dir: Path, collector: OtlpCollector, caplog: pytest.LogCaptureFixture
) -> None:
    """While the collector keeps the first export waiting, runs complete as usual; the spans
    that wait meanwhile are at most ``max_queue_spans`` besides the batch in flight, the rest
    are dropped, not held, and the drops are a log line or two, not one per span."""
    caplog.set_level(logging.WARNING)
    queue, batch = 4, 2
    node = traced_node(
        data_dir, collector.base, timeout_s=60.0, max_queue_spans=queue, max_batch_spans=batch
    )
    run_ids = []
    try:
        collector.hold()
        for _ in range(5):  # ~7 spans each: many times what may wait
            run_id = node.start(MESSAGE)
            approval_id = node.pending_approval(run_id)
            node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
            ends = [e.event for e in node.finish(run_id)]
            assert "run.completed" in ends, ends
            run_ids.append(run_id)
        assert eventually(lambda: collector.requests() >= 1, timeout=30)
        assert collector.requests() == 1, "a second export went out while the first waited"
        collector.release()
    finally:
        close_node(node)
    received = {s.span_id for s in collector.spans()}
    assert 1 <= len(received) <= queue + batch, len(received)
    # One line per 20 s window (the SDK's duplicate filter), however many spans were dropped.
    drops = [r for r in caplog.records if r.getMessage().startswith("Queue full")]
    assert len(drops) <= 2, [r.getMessage() for r in drops]


CHILD = """
import json, sys
from pathlib import Path
from tests.transports.http.httpkit import close_node, open_node
node = open_node(Path(sys.argv[1]))
try:
    run_id = node.start("hello there")
    ends = [e.event for e in node.finish(run_id)]
finally:
    close_node(node)
loaded = sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk", "opentelemetry.exp")))
print(json.dumps({"ends": ends, "loaded": loaded}))
"""


def test_without_an_endpoint_nothing_is_sent_and_the_sdk_is_not_imported(
    data_dir: Path, collector: OtlpCollector
) -> None:
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.base,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{collector.base}/v1/traces",
        "OTEL_TRACES_EXPORTER": "otlp",
    }
    env.pop("REEL_TELEMETRY_OTLP_ENDPOINT", None)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(data_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "run.completed" in report["ends"]
    assert report["loaded"] == []
    assert collector.requests() == 0 and not collector.other_paths


def test_a_run_resumed_after_a_restart_goes_on_in_the_same_trace(
    data_dir: Path, collector: OtlpCollector
) -> None:
    """Spans from before the restart (the first turn, the call's decision) and after it (the
    approval, the execution, the second turn, the run's end) are one trace, and the ones from
    before name the root span the restarted run records as their parent."""
    node = traced_node(data_dir, collector.base)
    try:
        run_id = node.start(MESSAGE)
        approval_id = node.pending_approval(run_id)
        assert eventually(
            lambda: any(s.name == "reel.turn" for s in of_trace(collector, run_id)), timeout=30
        )
    finally:
        close_node(node)
    before = {s.span_id for s in of_trace(collector, run_id)}
    node = traced_node(data_dir, collector.base)
    try:
        decide = f"/v1/approvals/{approval_id}"
        assert eventually(
            lambda: node.call("POST", decide, {"decision": "allow"}).status == 200, timeout=30
        )
        assert "run.completed" in [e.event for e in node.finish(run_id)]
        assert eventually(
            lambda: any(s.name == "reel.run" for s in of_trace(collector, run_id)), timeout=30
        )
    finally:
        close_node(node)
    spans = of_trace(collector, run_id)
    assert {s.trace_id for s in collector.spans()} == {trace_id(run_id)}
    (root,) = [s for s in spans if s.name == "reel.run"]
    first = [s for s in spans if s.span_id in before]
    assert {s.name for s in first} >= {"reel.context", "reel.turn", "reel.tool.decision"}
    assert "reel.run" not in {s.name for s in first}
    after = {s.name for s in spans if s.span_id not in before}
    assert after >= {"reel.tool.approval", "reel.tool.execute", "reel.tool fs.read", "reel.turn"}
    ids = {s.span_id for s in spans}
    for span in spans:
        assert span.parent_id is None or span.parent_id in ids, span.name
    assert [s.parent_id for s in first if s.name == "reel.turn"] == [root.span_id]
