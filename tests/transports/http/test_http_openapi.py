"""/v1/openapi.json is true: every route is in it, and real responses match it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import jsonschema_rs

from tests.transports.http.httpkit import MAX_BODY, SHELL, HttpNode, HttpReply
from transports.build import version
from transports.http.openapi import document, operation_id

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def template_of(path: str, doc: dict[str, Any]) -> str:
    bare = path.split("?")[0]
    for template in doc["paths"]:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        if re.fullmatch(pattern, bare):
            return str(template)
    raise AssertionError(f"{bare} is not in the document")


def check(doc: dict[str, Any], method: str, path: str, reply: HttpReply) -> None:
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


def test_every_served_route_is_documented(node: HttpNode) -> None:
    doc = document()
    served = set()
    for resource in node.server.runner.app.router.resources():
        info = resource.get_info()
        path = info.get("path") or info.get("formatter")
        if path and (path.startswith("/v1/") or path in ("/metrics", "/healthz")):
            served.add(path)
    assert served == set(doc["paths"])
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["version"] == version()


def test_the_served_document_is_the_generated_one(node: HttpNode) -> None:
    reply = node.call("GET", "/v1/openapi.json")
    assert reply.status == 200
    assert reply.json() == json.loads(json.dumps(document()))
    check(document(), "GET", "/v1/openapi.json", reply)


def test_real_responses_match_the_document(node: HttpNode) -> None:
    doc = document()
    calls: list[tuple[str, str, Any, bytes | None]] = []

    def call(method: str, path: str, body: Any = None, raw: bytes | None = None) -> HttpReply:
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
    events_op = doc["paths"]["/v1/runs/{run_id}/events"]["get"]
    event_schema = jsonschema_rs.Draft202012Validator(
        events_op["responses"]["200"]["content"]["text/event-stream"]["schema"]
    )
    entry_schema = jsonschema_rs.Draft202012Validator(
        {"$ref": "#/components/schemas/TapeEntry", "components": doc["components"]}
    )
    events = node.finish(shell)
    assert events
    for event in events:
        event_schema.validate({"id": event.id, "event": event.event, "data": event.data})
        entry_schema.validate(json.loads(event.data))


# --- what generators need: refs that resolve, unique titles, operation ids, named enums --------


def _walk(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object inside ``value``, ``value`` included."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


def test_every_ref_resolves() -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    refs = {node["$ref"] for node in _walk(doc) if "$ref" in node}
    refs |= {
        ref
        for node in _walk(doc)
        if isinstance(node.get("mapping"), dict)
        for ref in node["mapping"].values()
    }
    assert refs, "the document references no schema"
    for ref in sorted(refs):
        assert ref.startswith("#/components/schemas/"), ref
        assert ref.removeprefix("#/components/schemas/") in schemas, f"{ref} does not resolve"


def test_each_schema_title_is_unique_and_names_its_component() -> None:
    schemas = document()["components"]["schemas"]
    for name, schema in schemas.items():
        assert schema.get("title") == name, (name, schema.get("title"))


def test_every_served_operation_has_a_stable_unique_operation_id(node: HttpNode) -> None:
    """Every route the app serves (HEAD aside, the console's files aside) is an operation of
    the document whose operationId is its handler's, and no two operations share one."""
    doc = document()
    served = 0
    for route in node.server.runner.app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method == "HEAD" or path not in doc["paths"]:
            continue
        operation = doc["paths"][path][route.method.lower()]
        assert operation["operationId"] == operation_id(route.handler), (route.method, path)
        served += 1
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert served == len(ids)
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)
    for name in ids:
        assert re.fullmatch(r"[a-z][A-Za-z]+", name), name


def test_literals_are_named_enums_or_constants() -> None:
    """No inline enum of several values inside a component (generators number those: Kind1,
    Kind2, ...): each is a component named for where it stands; one value is a ``const``."""
    doc = document()
    schemas = doc["components"]["schemas"]
    for name, schema in schemas.items():
        for node in _walk(schema):
            if "enum" in node:
                assert node is schema, f"{name} holds an inline enum {node['enum']}"
    for name, schema in schemas.items():
        if "enum" in schema:
            assert len(schema["enum"]) > 1 and schema["title"] == name
    assert schemas["RunStartedEvent"]["properties"]["kind"] == {"const": "run.started"}
    assert sorted(schemas["HealthStatus"]["enum"]) == ["catching_up", "draining", "ok"]
    decision = schemas["DecisionRequest"]["properties"]
    assert decision["decision"] == {"$ref": "#/components/schemas/DecisionRequestDecision"}


def test_each_operation_documents_the_errors_it_answers(node: HttpNode) -> None:
    """Each refusal every route can give (no token, an unknown query parameter, a body over the
    limit) is a status the operation documents, with the JSON error body."""
    doc = document()
    for path, item in doc["paths"].items():
        concrete = re.sub(r"\{channel\}", "web", re.sub(r"\{[a-z_]+_id\}", UNKNOWN, path))
        concrete = concrete.replace("{name}", "no_such_secret").replace("{server}", "probe")
        for method, operation in item.items():
            upper = method.upper()
            probes = [node.call(upper, concrete, raw=b"x" * (MAX_BODY + 1))]
            if operation.get("security") != []:
                probes.append(node.call(upper, concrete, auth=None))
                probes.append(node.call(upper, f"{concrete}?zz=1"))
            for reply in probes:
                assert reply.status in (400, 401, 413), (upper, concrete, reply)
                check(doc, upper, concrete, reply)
