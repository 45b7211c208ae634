"""``/v1/tasks`` on a real node: list (filters, paging, bad filters), one task, cancel (a running
handler is stopped; a finished task is a 409), who may do what, and every reply as
``/v1/openapi.json`` documents it."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from actors.tasks.handlers import TaskContext
from events.catalog import AccessDecided
from events.task_lifecycle import TaskStatus
from tests.transports.http.httpkit import HttpNode, HttpReply, eventually
from tests.transports.http.test_http_openapi import check
from transports.http.openapi import document

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def call(
    node: HttpNode, method: str, path: str, body: Any = None, token: str | None = None
) -> HttpReply:
    auth = "default" if token is None else f"Bearer {token}"
    reply = node.call(method, path, body, auth=auth)
    check(document(), method, path, reply)
    return reply


def ended(node: HttpNode, task_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body: dict[str, Any] = call(node, "GET", f"/v1/tasks/{task_id}").json()
        return body if body["state"] in ("succeeded", "failed", "expired", "cancelled") else None

    found = eventually(probe)
    assert found, f"task {task_id} did not end"
    return found  # type: ignore[no-any-return]


def token_for(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


def task_gauge(node: HttpNode) -> dict[str, float]:
    reply = node.call("GET", "/metrics")
    assert reply.status == 200
    families = {f.name: f for f in text_string_to_metric_families(reply.body.decode())}
    assert families["reel_tasks"].type == "gauge"
    return {s.labels["state"]: s.value for s in families["reel_tasks"].samples}


def test_list_filter_page_and_show(node: HttpNode) -> None:
    queue = node.runtime.node.tasks
    done = [queue.enqueue("noop", {"n": n}).task_id for n in range(3)]
    unknown = queue.enqueue("nope").task_id
    for task_id in (*done, unknown):
        ended(node, task_id)

    listed = call(node, "GET", "/v1/tasks")
    assert listed.status == 200
    items = listed.json()["items"]
    assert [t["task_id"] for t in items] == sorted((*done, unknown))
    assert listed.json()["next_after"] is None
    assert eventually(lambda: task_gauge(node)["succeeded"] == 3)
    assert task_gauge(node) == {
        **{status.value: 0.0 for status in TaskStatus},
        "succeeded": 3.0,
        "failed": 1.0,
    }  # every state listed, zero included

    succeeded = call(node, "GET", "/v1/tasks?state=succeeded").json()["items"]
    assert {t["task_id"] for t in succeeded} == set(done)
    assert all(t["result"] == {"ok": True} and t["attempts"] == 1 for t in succeeded)
    failed = call(node, "GET", "/v1/tasks?state=failed&kind=nope").json()["items"]
    assert [(t["task_id"], t["error_kind"]) for t in failed] == [(unknown, "unknown_kind")]
    assert "no handler is registered for task kind 'nope'" in failed[0]["error"]

    first = call(node, "GET", "/v1/tasks?limit=2").json()
    assert len(first["items"]) == 2 and first["next_after"] == first["items"][-1]["task_id"]
    rest = call(node, "GET", f"/v1/tasks?limit=2&after={first['next_after']}").json()
    assert [t["task_id"] for t in first["items"] + rest["items"]] == sorted((*done, unknown))

    bad_state = call(node, "GET", "/v1/tasks?state=bogus")
    assert bad_state.status == 400 and bad_state.error["field"] == "query.state"
    assert "queued, running, retrying" in bad_state.error["message"]
    bad_kind = call(node, "GET", "/v1/tasks?kind=Not%20a%20kind")
    assert bad_kind.status == 400 and bad_kind.error["field"] == "query.kind"
    typo = call(node, "GET", "/v1/tasks?stat=queued")
    assert typo.status == 400 and typo.error["field"] == "query.stat"
    assert call(node, "GET", "/v1/tasks?limit=0").error["field"] == "query.limit"

    one = call(node, "GET", f"/v1/tasks/{done[0]}")
    assert one.status == 200 and one.json()["payload"] == {"n": 0}
    assert one.json()["principal"] == "node" and one.json()["kind"] == "noop"
    assert call(node, "GET", f"/v1/tasks/{UNKNOWN}").status == 404
    assert call(node, "GET", "/v1/tasks/not-an-id").status == 404


def test_cancel_a_running_task_then_again(node: HttpNode) -> None:
    queue = node.runtime.node.tasks
    seen: list[str | None] = []

    def slow(payload: Any, context: TaskContext) -> Any:
        context.wait(30)
        seen.append(context.why)

    queue.register("slow", slow)
    task_id = queue.enqueue("slow").task_id
    assert eventually(
        lambda: call(node, "GET", f"/v1/tasks/{task_id}").json()["state"] == "running"
    )
    bad = call(node, "POST", f"/v1/tasks/{task_id}/cancel", {"reson": "typo"})
    assert bad.status == 400 and bad.error["field"] == "$.reson"
    reply = call(node, "POST", f"/v1/tasks/{task_id}/cancel", {"reason": "not needed"})
    assert reply.status == 200, reply
    body = reply.json()
    assert (body["state"], body["cancelled_by"], body["cancel_reason"]) == (
        "cancelled",
        "admin",
        "not needed",
    )
    assert eventually(lambda: seen == ["cancelled"])
    again = call(node, "POST", f"/v1/tasks/{task_id}/cancel")
    assert again.status == 409 and "already ended" in again.error["message"]
    assert call(node, "POST", f"/v1/tasks/{UNKNOWN}/cancel").status == 404
    kinds = [r.kind for r in node.runtime.journal.read_stream(f"task/{task_id}")]
    assert kinds == ["task.enqueued", "task.claimed", "task.cancelled"]


def test_who_may_read_and_cancel_tasks(node: HttpNode) -> None:
    queue = node.runtime.node.tasks
    later = queue.enqueue("noop", delay_s=3600).task_id
    viewer = token_for(node, "user:vera", "viewer")
    operator = token_for(node, "user:otto", "operator")
    agent = token_for(node, "agent:bot", "agent")

    assert call(node, "GET", "/v1/tasks", token=viewer).json()["items"][0]["task_id"] == later
    assert call(node, "GET", f"/v1/tasks/{later}", token=viewer).status == 200
    refused = call(node, "POST", f"/v1/tasks/{later}/cancel", token=viewer)
    assert refused.status == 403 and "task.cancel" in refused.error["message"]

    for path in ("/v1/tasks", f"/v1/tasks/{later}"):
        denied = call(node, "GET", path, token=agent)
        assert denied.status == 403 and "task." in denied.error["message"]

    allowed = call(node, "POST", f"/v1/tasks/{later}/cancel", {"reason": "ops"}, token=operator)
    assert allowed.status == 200 and allowed.json()["cancelled_by"] == "user:otto"

    decided = [
        (row.principal, event.outcome)
        for row in node.runtime.journal.events_of_kinds(("access.decided",))
        if isinstance(event := row.decode(), AccessDecided) and event.action == "task.cancel"
    ]
    assert decided == [("user:vera", "deny"), ("user:otto", "allow")]
