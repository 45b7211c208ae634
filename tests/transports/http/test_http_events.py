"""/v1/runs/{id}/events: the tape as Server-Sent Events, resumable, cheap to abandon."""

from __future__ import annotations

import json

from tests.transports.http.httpkit import SHELL, TERMINAL, HttpNode, eventually

TOOLS = "\n".join(
    ["slow tools", "/sleep 300", *[f'/tool echo {{"text":"e{i}"}}' for i in range(3)]]
)


def tape(node: HttpNode, run_id: str) -> list[dict[str, object]]:
    items: list[dict[str, object]] = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()[
        "items"
    ]
    return items


def test_the_stream_is_the_tape_and_ends_at_the_terminal_entry(node: HttpNode) -> None:
    run_id = node.start(TOOLS)
    events = node.finish(run_id)
    entries = tape(node, run_id)
    assert [e.id for e in events] == [str(e["tape_seq"]) for e in entries]
    assert [e.event for e in events] == [e["kind"] for e in entries]
    assert [json.loads(e.data) for e in events] == entries
    assert events[-1].event in TERMINAL
    # a stream opened after the end replays the tape and ends too
    assert [e.id for e in node.finish(run_id)] == [e.id for e in events]


def test_a_reconnect_with_last_event_id_misses_nothing_and_repeats_nothing(node: HttpNode) -> None:
    run_id = node.start(TOOLS)
    first = node.stream(run_id)
    head = [first.next() for _ in range(3)]
    first.close()  # disconnect mid-run
    seen = [int(e.id) for e in head if e is not None and e.id is not None]
    assert seen == [0, 1, 2]

    second = node.stream(run_id, headers={"Last-Event-ID": "2"})
    rest = second.rest()
    second.close()
    ids = seen + [int(e.id) for e in rest if e.id is not None]
    assert ids == list(range(len(tape(node, run_id))))
    assert rest[-1].event in TERMINAL


def test_after_resumes_and_last_event_id_wins_over_it(node: HttpNode) -> None:
    run_id = node.start(TOOLS)
    node.finish(run_id)
    total = len(tape(node, run_id))
    by_query = node.stream(run_id, query="?after=4").rest()
    assert [int(e.id) for e in by_query if e.id] == list(range(5, total))
    both = node.stream(run_id, headers={"Last-Event-ID": "6"}, query="?after=1").rest()
    assert [int(e.id) for e in both if e.id] == list(range(7, total))


def test_a_live_run_is_streamed_as_it_happens(node: HttpNode) -> None:
    run_id = node.start(SHELL)
    stream, requested = node.until(run_id, "tool.approval_requested")
    approval_id = requested.entry["event"]["approval_id"]
    decided = node.call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
    assert decided.status == 200
    kinds = [e.event for e in stream.rest()]
    stream.close()
    assert "tool.approval_resolved" in kinds and "tool.completed" in kinds
    assert kinds[-1] == "run.completed"


def test_keep_alive_comments_while_nothing_happens(node: HttpNode) -> None:
    run_id = node.start(SHELL)
    stream, _ = node.until(run_id, "run.awaiting_approval")
    # the node's keep-alive is 0.3 s here; the run waits for a human, so only comments come
    lines: list[bytes] = []
    while not lines or not lines[-1].startswith(b":"):
        lines.append(stream.response.readline().strip())
    stream.close()
    assert lines[-1] == b": keep-alive"
    assert all(line == b"" for line in lines[:-1])


def test_a_client_that_leaves_costs_nothing(node: HttpNode) -> None:
    projector = node.runtime.projector
    baseline = len(projector._listeners)  # the projector's subscribers, to see leaks
    run_id = node.start(SHELL)
    stream, _ = node.until(run_id, "run.awaiting_approval")
    context = node.server.context
    assert context.streams == 1
    assert len(projector._listeners) == baseline  # followers share the server's one signal
    stream.close()  # goes away while the run still waits
    assert eventually(lambda: context.streams == 0)
    assert len(projector._listeners) == baseline
    metrics = node.call("GET", "/metrics").body.decode()
    assert "reel_http_sse_streams 0" in metrics


def test_bad_resume_points_are_400(node: HttpNode) -> None:
    run_id = node.start("short")
    for headers, query, field in [
        ({"Last-Event-ID": "x"}, "", "header.Last-Event-ID"),
        ({"Last-Event-ID": ""}, "", "header.Last-Event-ID"),
        ({}, "?after=-5", "query.after"),
    ]:
        reply = node.call("GET", f"/v1/runs/{run_id}/events{query}", headers=headers)
        assert reply.status == 400
        assert reply.error["field"] == field


def test_stopping_the_server_ends_open_streams(node: HttpNode) -> None:
    run_id = node.start(SHELL)
    stream, _ = node.until(run_id, "run.awaiting_approval")
    node.server.close()
    assert stream.rest() == []  # the response completes; the client would reconnect
    stream.close()
    assert node.server.context.streams == 0
    node.server.close()  # idempotent
