"""``GET /v1/incidents`` and ``reel_incidents_open`` on a real node whose watchdog watches a
deliberately stuck tool: filters, paging, bad parameters, who may read, the OpenAPI document,
and the gauge going up and back down."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from events.catalog import INCIDENT_DOMAINS
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.config import WatchdogSection
from transports.http.openapi import document

STUCK = '/tool sleep {"seconds": 2}'


@pytest.fixture
def node(data_dir: Path) -> Iterator[HttpNode]:
    running = open_node(data_dir, watchdog=WatchdogSection(run_stall_s=0.4, interval_s=0.1))
    try:
        yield running
    finally:
        close_node(running)


def token(node: HttpNode, principal: str, role: str) -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    return f"Bearer {reply.json()['token']}"


def incidents(node: HttpNode, query: str = "", auth: str | None = "default") -> Any:
    reply = node.call("GET", f"/v1/incidents{query}", auth=auth)
    check(document(), "GET", f"/v1/incidents{query}", reply)
    return reply


def gauge(node: HttpNode) -> dict[str, float]:
    reply = node.call("GET", "/metrics")
    assert reply.status == 200
    families = {f.name: f for f in text_string_to_metric_families(reply.body.decode())}
    family = families["reel_incidents_open"]
    assert family.type == "gauge"
    return {s.labels["domain"]: s.value for s in family.samples}


def test_incidents_over_http(node: HttpNode) -> None:
    assert incidents(node).json() == {
        "items": [],
        "limit": 50,
        "limit_clamped": False,
        "next_after": None,
    }
    assert gauge(node) == dict.fromkeys(INCIDENT_DOMAINS, 0.0)  # every domain, zero included

    first = node.start(STUCK)
    second = node.start(STUCK)
    page = eventually(
        lambda: (
            len(items := incidents(node, "?state=open&domain=run").json()["items"]) == 2 and items
        )
    )
    assert page, "two run incidents"
    assert {item["subject"] for item in page} == {first, second}
    item = page[0]
    assert (item["domain"], item["state"], item["action"], item["how"]) == (
        "run",
        "open",
        None,
        None,
    )
    assert item["evidence"]["measure"] == "seconds_without_tape_entry"
    assert item["evidence"]["limit"] == 0.4
    assert gauge(node)["run"] == 2

    one = incidents(node, "?limit=1").json()
    assert len(one["items"]) == 1 and one["next_after"] == one["items"][0]["incident_id"]
    rest = incidents(node, f"?limit=1&after={one['next_after']}").json()
    assert [i["incident_id"] for i in one["items"] + rest["items"]] == [
        i["incident_id"] for i in page
    ]
    assert rest["next_after"] is None
    assert incidents(node, "?limit=5000").json()["limit_clamped"] is True
    assert incidents(node, "?domain=journal").json()["items"] == []

    node.finish(first)
    node.finish(second)
    assert eventually(lambda: gauge(node)["run"] == 0)
    resolved = eventually(
        lambda: len(items := incidents(node, "?state=resolved").json()["items"]) == 2 and items
    )
    assert resolved and {i["how"] for i in resolved} == {"cleared"}
    assert incidents(node, "?state=open").json()["items"] == []


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("?state=closed", "query.state", "state must be one of open, resolved"),
        ("?domain=disk", "query.domain", "domain must be one of run, task, approval"),
        ("?after=nope", "query.after", "after must be an id"),
        ("?limit=0", "query.limit", "limit must be at least 1"),
        ("?status=open", "query.status", "status"),
    ],
)
def test_bad_parameters_name_the_field(
    node: HttpNode, query: str, field: str, message: str
) -> None:
    reply = incidents(node, query)
    assert reply.status == 400
    assert reply.error["field"] == field
    assert message in reply.error["message"]


def test_who_may_read_incidents(node: HttpNode) -> None:
    for principal, role in (
        ("user:v", "viewer"),
        ("user:a", "approver"),
        ("user:o", "operator"),
    ):
        assert incidents(node, auth=token(node, principal, role)).status == 200
    refused = incidents(node, auth=token(node, "agent:app", "agent"))
    assert refused.status == 403
    assert "incident.read is not permitted" in refused.error["message"]
    assert incidents(node, auth=None).status == 401
    whoami = node.call("GET", "/v1/whoami", auth=token(node, "user:w", "viewer")).json()
    assert whoami["may"]["incident.read"] is True
