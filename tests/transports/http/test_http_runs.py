"""/v1/runs: a run's record, its tape page by page, cancellation."""

from __future__ import annotations

import msgspec
import pytest

from tests.transports.http.httpkit import HttpNode

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
TOOLS = "\n".join(["three tools", *[f'/tool echo {{"text":"e{i}"}}' for i in range(3)]])


def test_the_tape_is_paged_densely_to_the_end(node: HttpNode) -> None:
    run_id = node.start(TOOLS)
    node.finish(run_id)
    whole = node.call("GET", f"/v1/runs/{run_id}/tape?limit=1000").json()
    assert whole["next_after"] is None and whole["limit_clamped"] is False
    entries = whole["items"]
    assert [e["tape_seq"] for e in entries] == list(range(len(entries)))
    assert len(entries) > 6
    # the API sends the stored event JSON as is: the same as the typed view's records
    assert entries == msgspec.json.decode(msgspec.json.encode(node.runtime.views.tape(run_id)))
    assert entries[-1]["kind"] == "run.completed"

    paged: list[dict[str, object]] = []
    after = -1
    pages = 0
    while True:
        page = node.call("GET", f"/v1/runs/{run_id}/tape?after={after}&limit=4").json()
        paged += page["items"]
        pages += 1
        if page["next_after"] is None:
            break
        assert page["next_after"] == page["items"][-1]["tape_seq"]
        after = page["next_after"]
    assert paged == entries
    assert pages == -(-len(entries) // 4)


def test_tape_limit_beyond_the_cap_is_clamped_and_said(node: HttpNode) -> None:
    run_id = node.start("short")
    node.finish(run_id)
    page = node.call("GET", f"/v1/runs/{run_id}/tape?limit=100000").json()
    assert page["limit"] == 1000 and page["limit_clamped"] is True
    empty = node.call("GET", f"/v1/runs/{run_id}/tape?after=999").json()
    assert empty["items"] == [] and empty["next_after"] is None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-2", "query.after"),
        ("after=abc", "query.after"),
        ("after=1.5", "query.after"),
        ("after=99999999999999999999", "query.after"),
        ("limit=0", "query.limit"),
    ],
)
def test_bad_tape_parameters_are_400(node: HttpNode, query: str, field: str) -> None:
    run_id = node.start("short")
    reply = node.call("GET", f"/v1/runs/{run_id}/tape?{query}")
    assert reply.status == 400
    assert reply.error["field"] == field


def test_a_run_record_and_unknown_runs(node: HttpNode) -> None:
    run_id = node.start("record me")
    node.finish(run_id)
    run = node.call("GET", f"/v1/runs/{run_id}").json()
    assert run["run_id"] == run_id and run["state"] == "done" and run["turns"] == 1
    for method, path in [
        ("GET", f"/v1/runs/{UNKNOWN}"),
        ("GET", f"/v1/runs/{UNKNOWN}/tape"),
        ("GET", f"/v1/runs/{UNKNOWN}/events"),
        ("POST", f"/v1/runs/{UNKNOWN}/cancel"),
        ("GET", "/v1/runs/not-a-run"),
    ]:
        reply = node.call(method, path)
        assert reply.status == 404, (method, path)
        assert reply.error["code"] == "not_found"


def test_cancel_a_live_run_then_again_is_409(node: HttpNode) -> None:
    run_id = node.start("/sleep 10000\nslow")
    stream, _ = node.until(run_id, "run.started")
    reply = node.call("POST", f"/v1/runs/{run_id}/cancel")
    assert reply.status == 202
    assert reply.json()["run_id"] == run_id
    rest = stream.rest()
    stream.close()
    assert rest[-1].event == "run.cancelled"
    assert rest[-1].entry["event"]["requested_by"] == "admin"
    assert node.call("GET", f"/v1/runs/{run_id}").json()["state"] == "cancelled"
    again = node.call("POST", f"/v1/runs/{run_id}/cancel", {})
    assert again.status == 409
    assert again.error["code"] == "conflict"
    bad = node.call("POST", f"/v1/runs/{run_id}/cancel", {"now": True})
    assert (bad.status, bad.error["field"]) == (400, "$.now")
