"""/v1/openapi.json is true: every route is in it, and real responses match it."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema_rs

from tests.transports.http.httpkit import SHELL, Node, Reply
from transports.http.openapi import SSE_EVENT, document

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def template_of(path: str, doc: dict[str, Any]) -> str:
    bare = path.split("?")[0]
    for template in doc["paths"]:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        if re.fullmatch(pattern, bare):
            return str(template)
    raise AssertionError(f"{bare} is not in the document")


def check(doc: dict[str, Any], method: str, path: str, reply: Reply) -> None:
    """The reply's status is documented for the operation, and its body matches the schema."""
    operation = doc["paths"][template_of(path, doc)][method.lower()]
    spec = operation["responses"].get(str(reply.status))
    assert spec is not None, f"{method} {path}: status {reply.status} is not documented"
    content_type = reply.headers["content-type"].split(";")[0]
    media = spec["content"].get(content_type)
    assert media is not None, f"{method} {path}: {content_type} is not documented"
    if content_type == "application/json":
        schema = {**media["schema"], "components": doc["components"]}
        jsonschema_rs.Draft202012Validator(schema).validate(reply.json())


def test_every_served_route_is_documented(node: Node) -> None:
    doc = document()
    served = set()
    for resource in node.server.runner.app.router.resources():
        info = resource.get_info()
        path = info.get("path") or info.get("formatter")
        if path and (path.startswith("/v1/") or path in ("/metrics", "/healthz")):
            served.add(path)
    assert served == set(doc["paths"])
    assert doc["openapi"].startswith("3.1")


def test_the_served_document_is_the_generated_one(node: Node) -> None:
    reply = node.call("GET", "/v1/openapi.json")
    assert reply.status == 200
    assert reply.json() == json.loads(json.dumps(document()))
    check(document(), "GET", "/v1/openapi.json", reply)


def test_real_responses_match_the_document(node: Node) -> None:
    doc = document()
    calls: list[tuple[str, str, Any, bytes | None]] = []

    def call(method: str, path: str, body: Any = None, raw: bytes | None = None) -> Reply:
        reply = node.call(method, path, body, raw=raw)
        check(doc, method, path, reply)
        calls.append((method, path, reply.status, raw))
        return reply

    sid = call("POST", "/v1/sessions", {"session_key": "k", "label": "l"}).json()["session_id"]
    call("POST", "/v1/sessions", {"session_key": "k"})
    call("POST", "/v1/sessions", raw=b'{"session_key": 1}')
    call("GET", "/v1/sessions?limit=1")
    call("GET", "/v1/sessions?limit=0")
    call("GET", f"/v1/sessions/{sid}")
    call("GET", f"/v1/sessions/{UNKNOWN}")
    run_id = call("POST", f"/v1/sessions/{sid}/messages", {"text": "hi"}).json()["run_id"]
    call("POST", f"/v1/sessions/{sid}/messages", raw=b"{}")
    call("POST", f"/v1/sessions/{sid}/messages", {"text": "x" * 5000})
    node.finish(run_id)
    call("GET", f"/v1/sessions/{sid}/runs?limit=5000")
    call("GET", f"/v1/runs/{run_id}")
    call("GET", f"/v1/runs/{UNKNOWN}")
    call("GET", f"/v1/runs/{run_id}/tape?limit=2")
    call("GET", f"/v1/runs/{run_id}/tape?after=x")
    call("POST", f"/v1/runs/{run_id}/cancel")
    call("POST", f"/v1/sessions/{sid}/reset")
    call("POST", f"/v1/sessions/{sid}/branch", {"label": "b"})
    call("POST", f"/v1/sessions/{sid}/branch", {"session_key": "k"})

    shell = node.start(SHELL)
    approval_id = node.pending_approval(shell)
    call("GET", "/v1/approvals?state=pending")
    call("GET", f"/v1/approvals/{approval_id}")
    call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow", "scope": "session"})
    call("POST", f"/v1/approvals/{approval_id}", {"decision": "allow"})
    call("POST", f"/v1/approvals/{approval_id}", {"decision": "no"})
    call("GET", "/v1/approvals?state=nope")
    call("GET", "/v1/journal/head")
    call("POST", "/v1/journal/verify")
    call("GET", "/metrics")
    call("GET", "/healthz")
    unauthorized = node.call("GET", "/v1/sessions", auth=None)
    check(doc, "GET", "/v1/sessions", unauthorized)
    statuses = {status for _, _, status, _ in calls}
    assert statuses >= {200, 201, 202, 400, 404, 409, 413}

    # the event stream: each event matches the documented event, its data the TapeEntry
    event_schema = jsonschema_rs.Draft202012Validator(SSE_EVENT)
    entry_schema = jsonschema_rs.Draft202012Validator(
        {"$ref": "#/components/schemas/TapeEntry", "components": doc["components"]}
    )
    events = node.finish(shell)
    assert events
    for event in events:
        event_schema.validate({"id": event.id, "event": event.event, "data": event.data})
        entry_schema.validate(json.loads(event.data))
