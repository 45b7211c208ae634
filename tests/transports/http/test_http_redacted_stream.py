"""What a client sees of a run whose model streamed secrets in pieces: the SSE stream, the
tape and the final answer show the same redacted text, and no secret."""

from __future__ import annotations

import json
from pathlib import Path

from events.redaction.redact import redact_text
from tests.actors.test_output_redaction import ChunkedProvider
from tests.events.redaction_corpus import SECRETS
from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node
from transports.config import HttpConfig, NodeConfig
from transports.http import start_http
from transports.runtime import open_runtime


def test_sse_tape_and_answer_show_the_same_redacted_text(data_dir: Path) -> None:
    provider = ChunkedProvider()
    text = "\n".join(s.text for s in SECRETS)
    script = provider.add([text[i : i + 3] for i in range(0, len(text), 3)])
    runtime = open_runtime(
        data_dir,
        config=NodeConfig(http=HttpConfig(port=0, max_body_bytes=MAX_BODY)),
        provider=provider,
    )
    server = start_http(runtime, keepalive_s=0.3)
    node = HttpNode(
        runtime=runtime, server=server, token=(data_dir / "admin.token").read_text().strip()
    )
    try:
        run_id = node.start(script)
        events = [json.loads(e.data) for e in node.finish(run_id)]
        tape = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()["items"]
    finally:
        close_node(node)
    assert events == tape
    streamed = "".join(e["event"]["text"] for e in events if e["kind"] == "run.output")
    (done,) = [e["event"] for e in events if e["kind"] == "run.completed"]
    assert streamed == done["answer"] == redact_text(text)[0]
    raw = json.dumps(events)
    for secret in SECRETS:
        for value in secret.values:
            assert value not in raw
