"""Operator queries over HTTP: the filters of ``GET /v1/approvals`` and ``GET /v1/runs``, what a
bad filter value answers, what each principal sees, and the unknown-parameter rule on every route.

One node (module scope) holds a small history, made through the API itself:

- session A (admin): a ``shell.run`` run whose approval the admin allowed (done), then a plain
  run (done);
- session B (admin): a ``shell.run`` run whose approval is pending;
- session C (``user:op``, an operator): an ``http.fetch`` run whose approval is pending;
- session D (``agent:app``, an agent): a ``shell.run`` run whose approval is pending.

An operator policy forbids the viewer (``user:eve``) ``run.read`` of the runs ``user:op`` started.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.transports.http.httpkit import SHELL, HttpNode, close_node, eventually, open_node
from transports.http.guard import PUBLIC_ROUTES
from transports.http.openapi import query_parameters

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
NO_EVE_ON_OPS_RUNS = """
@id("ops.eve-not-on-op-runs")
forbid (principal == Principal::"user:eve", action == Action::"run.read", resource)
when { context.run_principal == Principal::"user:op" };
"""
FETCH = "/tool http.fetch " + json.dumps({"url": "http://127.0.0.1:9/"})


@dataclass(frozen=True)
class History:
    node: HttpNode
    tokens: dict[str, str]
    sessions: dict[str, str]
    runs: dict[str, str]
    approvals: dict[str, str]


def bearer(token: str) -> str:
    return f"Bearer {token}"


def mint(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


def start(node: HttpNode, text: str, session_id: str, token: str) -> str:
    reply = node.call(
        "POST", f"/v1/sessions/{session_id}/messages", {"text": text}, auth=bearer(token)
    )
    assert reply.status == 202, reply
    run_id: str = reply.json()["run_id"]
    return run_id


def session_of(node: HttpNode, token: str) -> str:
    reply = node.call("POST", "/v1/sessions", {}, auth=bearer(token))
    assert reply.status == 201, reply
    session_id: str = reply.json()["session_id"]
    return session_id


def state_of(node: HttpNode, run_id: str) -> str:
    state: str = node.call("GET", f"/v1/runs/{run_id}").json()["state"]
    return state


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    data = tmp_path_factory.mktemp("filters") / "data"
    (data / "policies").mkdir(parents=True)
    (data / "policies" / "eve.cedar").write_text(NO_EVE_ON_OPS_RUNS)
    node = open_node(data, keepalive_s=0.3, fetch=("127.0.0.1",))  # asked, not refused
    try:
        tokens = {
            "admin": node.token,
            "op": mint(node, "user:op", "operator"),
            "viewer": mint(node, "user:eve", "viewer"),
            "agent": mint(node, "agent:app", "agent"),
            "other-agent": mint(node, "agent:other", "agent"),
        }
        sessions = {
            "A": session_of(node, tokens["admin"]),
            "B": session_of(node, tokens["admin"]),
            "C": session_of(node, tokens["op"]),
            "D": session_of(node, tokens["agent"]),
        }
        runs: dict[str, str] = {}
        approvals: dict[str, str] = {}
        runs["A1"] = start(node, SHELL, sessions["A"], tokens["admin"])
        approvals["A1"] = node.pending_approval(runs["A1"])
        allowed = node.call("POST", f"/v1/approvals/{approvals['A1']}", {"decision": "allow"})
        assert allowed.status == 200, allowed
        assert node.finish(runs["A1"])[-1].event == "run.completed"
        runs["B1"] = start(node, SHELL, sessions["B"], tokens["admin"])
        approvals["B1"] = node.pending_approval(runs["B1"])
        runs["C1"] = start(node, FETCH, sessions["C"], tokens["op"])
        approvals["C1"] = node.pending_approval(runs["C1"])
        runs["D1"] = start(node, SHELL, sessions["D"], tokens["agent"])
        approvals["D1"] = node.pending_approval(runs["D1"])
        runs["A2"] = start(node, "hello", sessions["A"], tokens["admin"])
        assert node.finish(runs["A2"])[-1].event == "run.completed"
        for name in ("A1", "A2"):
            assert eventually(lambda n=name: state_of(node, runs[n]) == "done"), name
        for name in ("B1", "C1", "D1"):
            assert eventually(lambda n=name: state_of(node, runs[n]) == "awaiting_approval"), name
        yield History(node, tokens, sessions, runs, approvals)
    finally:
        close_node(node)


def ids(history: History, path: str, key: str, token: str | None = None) -> list[str]:
    """The ids a list answers with, following ``next_after`` to the end."""
    node = history.node
    auth = bearer(token or node.token)
    out: list[str] = []
    after = ""
    for _ in range(50):
        sep = "&" if "?" in path else "?"
        reply = node.call("GET", path + (f"{sep}after={after}" if after else ""), auth=auth)
        assert reply.status == 200, reply
        page = reply.json()
        out += [item[key] for item in page["items"]]
        if page["next_after"] is None:
            return out
        after = page["next_after"]
    raise AssertionError("the pages never ended")


def names(history: History, kind: str, found: list[str]) -> list[str]:
    """``found`` ids as the scenario's names (``A1``, ...), in the order found."""
    by_id = {v: k for k, v in getattr(history, kind).items()}
    return [by_id[i] for i in found]


# --- approvals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["A1", "B1", "C1", "D1"]),
        ("state=pending", ["B1", "C1", "D1"]),
        ("state=resolved", ["A1"]),
        ("run_id={B1}", ["B1"]),
        ("session_id={A}", ["A1"]),
        ("session_id={C}", ["C1"]),
        ("tool=http.fetch", ["C1"]),
        ("tool=shell.run", ["A1", "B1", "D1"]),
        ("principal=user:op", ["C1"]),
        ("principal=agent:app", ["D1"]),
        ("principal=admin", ["A1", "B1"]),
        ("decided_by=admin", ["A1"]),
        ("decided_by=user:op", []),
        ("tool=shell.run&state=pending", ["B1", "D1"]),
        ("tool=shell.run&state=pending&principal=admin", ["B1"]),
        ("run_id={C1}&tool=shell.run", []),
        (f"run_id={UNKNOWN}", []),
        ("tool=fs.read", []),
    ],
)
def test_each_approval_filter_narrows_the_list(
    history: History, query: str, expected: list[str]
) -> None:
    path = "/v1/approvals?" + query.format(**history.runs, **history.sessions)
    found = ids(history, path.rstrip("?"), "approval_id")
    assert names(history, "approvals", found) == expected


def test_a_filtered_approval_list_pages_through_the_matches_only(history: History) -> None:
    node = history.node
    first = node.call("GET", "/v1/approvals?tool=shell.run&limit=2").json()
    assert names(history, "approvals", [a["approval_id"] for a in first["items"]]) == ["A1", "B1"]
    assert first["next_after"] == history.approvals["B1"]
    rest = node.call(
        "GET", f"/v1/approvals?tool=shell.run&limit=2&after={first['next_after']}"
    ).json()
    assert names(history, "approvals", [a["approval_id"] for a in rest["items"]]) == ["D1"]
    assert rest["next_after"] is None


def test_the_filtered_records_hold_what_the_filter_names(history: History) -> None:
    items = history.node.call("GET", "/v1/approvals?principal=user:op").json()["items"]
    assert [(a["principal"], a["tool"], a["state"]) for a in items] == [
        ("user:op", "http.fetch", "pending")
    ]
    (resolved,) = history.node.call("GET", "/v1/approvals?decided_by=admin").json()["items"]
    assert (resolved["decided_by"], resolved["decision"]) == ("admin", "allow")


# --- runs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", ["A1", "B1", "C1", "D1", "A2"]),
        ("state=done", ["A1", "A2"]),
        ("state=awaiting_approval", ["B1", "C1", "D1"]),
        ("state=failed", []),
        ("session_id={A}", ["A1", "A2"]),
        ("session_id={D}", ["D1"]),
        ("session_id={B}&state=awaiting_approval", ["B1"]),
        ("session_id={B}&state=done", []),
        (f"session_id={UNKNOWN}", []),
    ],
)
def test_each_run_filter_narrows_the_list(
    history: History, query: str, expected: list[str]
) -> None:
    path = "/v1/runs?" + query.format(**history.sessions)
    assert names(history, "runs", ids(history, path.rstrip("?"), "run_id")) == expected


def test_runs_page_in_acceptance_order(history: History) -> None:
    node = history.node
    page = node.call("GET", "/v1/runs?limit=2").json()
    assert names(history, "runs", [r["run_id"] for r in page["items"]]) == ["A1", "B1"]
    assert (page["limit"], page["limit_clamped"]) == (2, False)
    assert page["next_after"] == history.runs["B1"]
    clamped = node.call("GET", "/v1/runs?limit=100000").json()
    assert (clamped["limit"], clamped["limit_clamped"]) == (200, True)
    records = node.call("GET", "/v1/runs?state=done").json()["items"]
    assert {r["state"] for r in records} == {"done"}
    assert all(r["session_id"] == history.sessions["A"] for r in records)


def test_a_sessions_runs_still_list_under_the_session(history: History) -> None:
    path = f"/v1/sessions/{history.sessions['A']}/runs"
    assert names(history, "runs", ids(history, path, "run_id")) == ["A1", "A2"]


# --- who sees what ----------------------------------------------------------------------------


def test_an_agent_lists_only_what_its_own_sessions_hold(history: History) -> None:
    agent = history.tokens["agent"]
    assert names(history, "runs", ids(history, "/v1/runs", "run_id", agent)) == ["D1"]
    found = ids(history, "/v1/approvals", "approval_id", agent)
    assert names(history, "approvals", found) == ["D1"]
    # a filter naming someone else's session or run finds nothing, not an error
    for path in (
        f"/v1/runs?session_id={history.sessions['A']}",
        f"/v1/approvals?run_id={history.runs['B1']}",
        "/v1/approvals?principal=admin",
    ):
        assert ids(history, path, "run_id" if "runs" in path else "approval_id", agent) == []
    other = history.tokens["other-agent"]
    assert ids(history, "/v1/runs", "run_id", other) == []
    assert ids(history, "/v1/approvals?state=pending", "approval_id", other) == []


def test_a_viewer_lists_everything_and_filters_alike(history: History) -> None:
    viewer = history.tokens["viewer"]
    listed = ids(history, "/v1/runs", "run_id", viewer)
    assert names(history, "runs", listed) == ["A1", "B1", "D1", "A2"]  # not C1: forbidden
    found = ids(history, "/v1/approvals?state=pending&tool=shell.run", "approval_id", viewer)
    assert names(history, "approvals", found) == ["B1", "D1"]


def test_a_forbid_on_run_read_holds_under_the_session_too(history: History) -> None:
    """``GET /v1/sessions/{id}/runs`` needs ``session.read`` and shows each run only when
    ``run.read`` permits it, as ``GET /v1/runs`` does: a forbid holds on both routes."""
    viewer, session = history.tokens["viewer"], history.sessions["C"]
    assert history.node.call("GET", f"/v1/sessions/{session}", auth=bearer(viewer)).status == 200
    assert ids(history, f"/v1/sessions/{session}/runs", "run_id", viewer) == []
    assert ids(history, f"/v1/sessions/{session}/runs", "run_id") == [history.runs["C1"]]
    refused = history.node.call("GET", f"/v1/runs/{history.runs['C1']}", auth=bearer(viewer))
    assert refused.status == 403 and "ops.eve-not-on-op-runs" in refused.error["message"]


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "field", "says"),
    [
        ("/v1/approvals?state=open", "query.state", "pending, resolved"),
        ("/v1/approvals?state=", "query.state", "pending, resolved"),
        ("/v1/approvals?run_id=nope", "query.run_id", "run id"),
        ("/v1/approvals?run_id=", "query.run_id", "run id"),
        ("/v1/approvals?session_id=" + "x" * 300, "query.session_id", "session id"),
        ("/v1/approvals?tool=Shell.Run", "query.tool", "tool name"),
        ("/v1/approvals?tool=", "query.tool", "tool name"),
        ("/v1/approvals?tool=a%00b", "query.tool", "tool name"),
        ("/v1/approvals?principal=%20alice", "query.principal", "principal"),
        ("/v1/approvals?decided_by=" + "a" * 200, "query.decided_by", "principal"),
        ("/v1/approvals?decided_by=ghp_" + "A1b2" * 9, "query.decided_by", "secret"),
        ("/v1/runs?state=running", "query.state", "awaiting_approval"),
        ("/v1/runs?state=DONE", "query.state", "accepted, in_progress"),
        ("/v1/runs?session_id=01arz", "query.session_id", "session id"),
        (
            "/v1/runs?run_id=" + UNKNOWN,
            "query.run_id",
            "after, limit, order, principal, q, session_id, state",
        ),
        ("/v1/runs?limit=0", "query.limit", "at least 1"),
        ("/v1/runs?after=x", "query.after", "previous page"),
        ("/v1/runs?state=done&state=failed", "query.state", "more than once"),
    ],
)
def test_a_bad_filter_is_400_naming_it(history: History, path: str, field: str, says: str) -> None:
    reply = history.node.call("GET", path)
    assert reply.status == 400, reply
    assert (reply.error["code"], reply.error["field"]) == ("invalid_argument", field)
    assert says in reply.error["message"]
    if "ghp_" in path:  # an identifier-shaped secret is never echoed back
        assert "ghp_" not in reply.body.decode()


def test_a_bad_filter_is_400_even_for_a_principal_who_sees_nothing(history: History) -> None:
    reply = history.node.call(
        "GET", "/v1/approvals?tool=BAD", auth=bearer(history.tokens["other-agent"])
    )
    assert (reply.status, reply.error["field"]) == (400, "query.tool")


# --- the unknown-parameter rule, on every route -------------------------------------------------


def concrete(template: str) -> str:
    """A path for a route template: each ``{name}`` (or ``{name:regex}``) becomes an id."""
    return re.sub(r"\{[^}]+\}", UNKNOWN, template)


def test_every_route_refuses_a_query_parameter_it_does_not_take(history: History) -> None:
    """Walks the application's own routes, so a route added later is covered too: an
    undescribed route would answer its 404 or 200 here, not the 400."""
    node = history.node
    checked: list[str] = []
    for route in node.server.runner.app.router.routes():
        resource = route.resource
        assert resource is not None
        template = resource.canonical
        if route.name in PUBLIC_ROUTES or template == "/healthz":
            continue
        path = concrete(template) + "?zzz=1"
        reply = node.call(route.method, path)
        assert reply.status == 400, (route.method, template, reply)
        if route.method == "HEAD":  # no body to read
            continue
        assert (reply.error["code"], reply.error["field"]) == ("invalid_argument", "query.zzz")
        taken = query_parameters()[(route.method, template)]
        message = reply.error["message"]
        assert "'zzz'" in message and all(name in message for name in taken), message
        checked.append(f"{route.method} {template}")
    for expected in (
        "GET /v1/runs",
        "GET /v1/approvals",
        "GET /v1/runs/{run_id}/events",
        "POST /v1/approvals/{approval_id}",
        "DELETE /v1/tokens/{token_id}",
        "GET /metrics",
        "GET /v1/openapi.json",
    ):
        assert expected in checked, expected


@pytest.mark.parametrize("path", ["/healthz?probe=1", "/?v=2", "/static/app.js?v=2"])
def test_public_routes_ignore_query_parameters(history: History, path: str) -> None:
    """Load balancers probe with their own parameters and browsers add cache busters: the
    public routes (no data, no token) take any query and ignore it."""
    reply = history.node.call("GET", path, auth=None)
    assert reply.status in (200, 404), reply  # 404: no console file of that name in this build
    if reply.status == 404:
        assert reply.error["code"] == "not_found"


def test_the_documented_filters_are_the_ones_taken(history: History) -> None:
    document = history.node.call("GET", "/v1/openapi.json").json()
    for path, expected in (
        ("/v1/approvals", {"state", "run_id", "session_id", "tool", "principal", "decided_by"}),
        ("/v1/runs", {"state", "session_id", "principal", "q", "order"}),
        ("/v1/sessions", {"principal", "q", "order"}),
    ):
        params = document["paths"][path]["get"]["parameters"]
        query = {p["name"] for p in params if p["in"] == "query"}
        assert query == expected | {"after", "limit"}
        for p in params:  # every one present is accepted when its value is valid
            value = valid_value(p["schema"], p["name"])
            if value is None:
                continue
            encoded = urllib.parse.urlencode({p["name"]: value})
            reply = history.node.call("GET", f"{path}?{encoded}")
            assert reply.status == 200, (p["name"], value, reply)
    states = document["paths"]["/v1/runs"]["get"]["parameters"][0]
    assert states["name"] == "state" and "awaiting_approval" in states["schema"]["enum"]


def valid_value(schema: dict[str, Any], name: str) -> str | None:
    if "enum" in schema:
        return str(schema["enum"][-1])
    return {
        "run_id": UNKNOWN,
        "session_id": UNKNOWN,
        "tool": "shell.run",
        "principal": "user:alice",
        "decided_by": "admin",
        "q": "echo",
        "after": UNKNOWN,
        "limit": "3",
    }.get(name)


def test_a_filter_of_bytes_that_are_not_utf8_is_400_naming_it(history: History) -> None:
    reply = history.node.call("GET", "/v1/approvals?tool=%ff%fe")
    assert (reply.status, reply.error["field"]) == (400, "query.tool")
