"""``GET /v1/sessions/{id}/postures`` on a real node: every tool with the node's posture, the
session's override (who set it, when) and the one a call meets, which is what the gate then
decides; who may read it; and every reply as ``/v1/openapi.json`` documents it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.transports.http.httpkit import HttpNode, HttpReply, close_node
from tests.transports.http.test_http_openapi import check
from transports.config import HttpConfig, NodeConfig, ToolsSection
from transports.http import start_http
from transports.http.openapi import document
from transports.runtime import open_runtime

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def call(
    node: HttpNode, method: str, path: str, body: Any = None, token: str | None = None
) -> HttpReply:
    reply = node.call(method, path, body, auth=f"Bearer {token or node.token}")
    check(document(), method, path, reply)
    return reply


def postures(node: HttpNode, session_id: str, token: str | None = None) -> dict[str, Any]:
    reply = call(node, "GET", f"/v1/sessions/{session_id}/postures", token=token)
    assert reply.status == 200, reply
    body: dict[str, Any] = reply.json()
    assert body["session_id"] == session_id
    return {item["tool"]: item for item in body["items"]}


def mint(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    token: str = reply.json()["token"]
    return token


@pytest.fixture
def configured(data_dir: Path) -> Iterator[HttpNode]:
    """A node whose config makes echo ask each time (``[tools.postures]``)."""
    config = NodeConfig(
        http=HttpConfig(port=0),
        tools=ToolsSection(postures={"echo": "ask_each_time"}),
    )
    runtime = open_runtime(data_dir, config=config)
    try:
        server = start_http(runtime)
    except BaseException:
        runtime.close(1.0)
        raise
    node = HttpNode(runtime, server, (data_dir / "admin.token").read_text().strip())
    try:
        yield node
    finally:
        close_node(node)


def test_every_tool_is_listed_with_the_posture_its_calls_meet(configured: HttpNode) -> None:
    node = configured
    sid = node.session()
    tools = postures(node, sid)
    assert list(tools) == sorted(s.name for s in node.runtime.catalog.specs())
    echo = tools["echo"]
    assert echo == {
        "tool": "echo",
        "risk": echo["risk"],
        "posture": "ask_each_time",
        "node_posture": "ask_each_time",
        "override": None,
        "set_by": None,
        "set_at_ms": None,
        "unavailable": None,
    }
    for item in tools.values():
        assert item["posture"] == item["node_posture"] and item["override"] is None

    set_reply = call(
        node, "POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": "always_allow"}
    )
    assert set_reply.status == 200, set_reply
    echo = postures(node, sid)["echo"]
    assert echo["posture"] == echo["override"] == "always_allow"
    assert echo["node_posture"] == "ask_each_time"
    assert echo["set_by"] == "admin" and isinstance(echo["set_at_ms"], int)
    # ...and it is what the gate decides: the call runs without asking.
    events = node.finish(node.start('/tool echo {"text": "x"}', sid))
    decided = next(e.entry["event"] for e in events if e.event == "tool.decided")
    assert decided["outcome"] == "allow" and decided["posture"] == "always_allow"
    # Another session keeps the node's posture.
    assert postures(node, node.session())["echo"]["posture"] == "ask_each_time"

    cleared = call(node, "POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": None})
    assert cleared.status == 200
    echo = postures(node, sid)["echo"]
    assert echo["override"] is None and echo["set_by"] is None
    assert echo["posture"] == "ask_each_time"


def test_the_override_names_who_set_it_last(node: HttpNode) -> None:
    sid = node.session()
    ops = mint(node, "user:root2", "admin")
    call(node, "POST", f"/v1/sessions/{sid}/postures", {"tool": "echo", "posture": "disabled"})
    call(
        node,
        "POST",
        f"/v1/sessions/{sid}/postures",
        {"tool": "echo", "posture": "ask_each_time"},
        token=ops,
    )
    echo = postures(node, sid)["echo"]
    assert (echo["override"], echo["set_by"]) == ("ask_each_time", "user:root2")
    # A reset keeps the overrides (docs/http-api.md).
    assert call(node, "POST", f"/v1/sessions/{sid}/reset", {}).status == 200
    assert postures(node, sid)["echo"]["override"] == "ask_each_time"


def test_who_may_read_a_sessions_postures(node: HttpNode) -> None:
    viewer = mint(node, "user:vic", "viewer")
    agent = mint(node, "agent:app", "agent")
    admins = node.session()
    made = node.call("POST", "/v1/sessions", {}, auth=f"Bearer {agent}")
    own = made.json()["session_id"]
    assert postures(node, admins, viewer)
    assert postures(node, own, agent)
    refused = call(node, "GET", f"/v1/sessions/{admins}/postures", token=agent)
    assert refused.status == 403, refused
    assert "session.read" in refused.error["message"]


@pytest.mark.parametrize("session_id", [UNKNOWN, "not-an-id"])
def test_an_unknown_session_is_404(node: HttpNode, session_id: str) -> None:
    reply = node.call("GET", f"/v1/sessions/{session_id}/postures")
    assert reply.status == 404, reply
    assert reply.error["code"] == "not_found"


def test_the_postures_take_no_query_parameters(node: HttpNode) -> None:
    reply = node.call("GET", f"/v1/sessions/{node.session()}/postures?tool=echo")
    assert reply.status == 400
    assert reply.error["field"] == "query.tool"
