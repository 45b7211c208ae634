"""Usage and budgets on a real node (docs/usage.md): the usage view by principal, session and
model with cost from ``[usage.prices]``, who may read whose, ``/metrics``; hard budgets refusing
a run before it starts (``budget.refused``, a 429 naming the budget) and ending one at a turn
boundary (``budget_exceeded``); Cedar reading ``context.usage_today``; the soft-limit incident,
once per budget and period; the view after a restart and after a rebuild from the journal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.budgets.config import Budget
from events.catalog import BudgetRefused, RunFailed, RunTurnCompleted, ToolDecided, kinds_of
from projections.usage import Price
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from tests.transports.http.test_http_openapi import check
from transports.config import ProviderConfig, UsageSection, WatchdogSection
from transports.http.openapi import document

MODEL = "det-1"
PRICES = {MODEL: Price(input_per_mtok=1_000_000, output_per_mtok=2_000_000)}
"""A token of input costs 1 and one of output 2: a cost is a sum of whole numbers."""
TOOL = '/tool echo {"text": "x"}'


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def settled(node: HttpNode) -> None:
    """Wait until the views include the journal's head (what a budget check before a run
    counts is what the usage view has folded)."""
    runtime = node.runtime
    head = runtime.journal.head().position
    assert runtime.projector.wait_for(head, 10) >= head


def token(node: HttpNode, principal: str, role: str = "agent") -> str:
    reply = node.call("POST", "/v1/tokens", {"principal": principal, "roles": [role]})
    assert reply.status == 201, reply
    return f"Bearer {reply.json()['token']}"


def send(node: HttpNode, auth: str, session_id: str, text: str) -> Any:
    return node.call("POST", f"/v1/sessions/{session_id}/messages", {"text": text}, auth=auth)


def session_of(node: HttpNode, auth: str) -> str:
    reply = node.call("POST", "/v1/sessions", {}, auth=auth)
    assert reply.status in (200, 201), reply
    session_id: str = reply.json()["session_id"]
    return session_id


def run_as(node: HttpNode, auth: str, session_id: str, text: str = "hello there") -> str:
    reply = send(node, auth, session_id, text)
    assert reply.status == 202, reply
    run_id: str = reply.json()["run_id"]
    node.finish(run_id)
    return run_id


def usage(node: HttpNode, query: str = "", auth: str | None = "default") -> Any:
    reply = node.call("GET", f"/v1/usage{query}", auth=auth)
    check(document(), "GET", f"/v1/usage{query}", reply)
    return reply


def turns(node: HttpNode) -> list[tuple[str, RunTurnCompleted]]:
    """Every ``run.turn_completed`` on the journal with its principal."""
    rows = node.runtime.journal.events_of_kinds(kinds_of(RunTurnCompleted))
    out = []
    for row in rows:
        event = row.decode()
        assert isinstance(event, RunTurnCompleted)
        out.append((row.principal, event))
    return out


def spent(node: HttpNode, principal: str) -> tuple[int, int]:
    """(input, output) tokens of ``principal``'s turns, summed from the journal itself."""
    mine = [e for p, e in turns(node) if p == principal]
    return sum(e.prompt_tokens for e in mine), sum(e.completion_tokens for e in mine)


@pytest.fixture
def priced(data_dir: Path) -> Iterator[HttpNode]:
    running = open_node(
        data_dir, provider=ProviderConfig(model=MODEL), usage=UsageSection(prices=PRICES)
    )
    try:
        yield running
    finally:
        close_node(running)


def test_usage_by_principal_session_and_model_with_cost(priced: HttpNode) -> None:
    node = priced
    empty = usage(node).json()
    assert empty["rows"] == [] and empty["total"]["tokens"] == 0  # a fresh node answers
    assert (empty["by"], empty["from"], empty["to"]) == ("principal", today(), today())

    alice, bob = token(node, "user:alice"), token(node, "user:bob")
    alice_session, bob_session = session_of(node, alice), session_of(node, bob)
    run_as(node, alice, alice_session, "one two three")
    run_as(node, alice, alice_session, "four five")
    run_as(node, bob, bob_session, "six")
    settled(node)

    a_in, a_out = spent(node, "user:alice")
    b_in, b_out = spent(node, "user:bob")
    assert a_in and a_out and b_in and b_out
    rows = {r["key"]: r for r in usage(node, "?by=principal").json()["rows"]}
    assert set(rows) == {"user:alice", "user:bob"}
    assert (rows["user:alice"]["input_tokens"], rows["user:alice"]["output_tokens"]) == (
        a_in,
        a_out,
    )
    assert rows["user:alice"]["turns"] == 2
    assert rows["user:alice"]["cost"] == pytest.approx(a_in + 2 * a_out)
    assert rows["user:bob"]["cost"] == pytest.approx(b_in + 2 * b_out)

    # The deterministic provider names no model: the run's configured one is used.
    by_model = usage(node, "?by=model").json()
    assert [r["key"] for r in by_model["rows"]] == [MODEL]
    assert by_model["total"]["tokens"] == a_in + a_out + b_in + b_out
    by_session = {r["key"]: r["tokens"] for r in usage(node, "?by=session").json()["rows"]}
    assert by_session == {alice_session: a_in + a_out, bob_session: b_in + b_out}

    # A principal that may not read others' usage sees only its own, in every grouping.
    mine = usage(node, "?by=principal", auth=alice).json()
    assert [r["key"] for r in mine["rows"]] == ["user:alice"]
    assert usage(node, "?by=model", auth=bob).json()["total"]["tokens"] == b_in + b_out
    viewer = token(node, "user:vera", "viewer")
    assert len(usage(node, auth=viewer).json()["rows"]) == 2  # read_only reads everyone's
    assert usage(node, auth=None).status == 401

    # Days outside the range hold nothing.
    assert usage(node, "?from=2020-01-01&to=2020-01-31").json()["rows"] == []

    families = {
        f.name: f
        for f in text_string_to_metric_families(node.call("GET", "/metrics").body.decode())
    }
    tokens = {
        (s.labels["model"], s.labels["kind"]): s.value for s in families["reel_tokens"].samples
    }
    assert tokens[(MODEL, "input")] == a_in + b_in
    assert tokens[(MODEL, "output")] == a_out + b_out
    assert tokens[(MODEL, "cached")] == 0
    (cost,) = families["reel_cost"].samples
    assert cost.value == pytest.approx(a_in + b_in + 2 * (a_out + b_out))

    # Summed from the view at that first scrape; kept up by the fold since.
    run_as(node, bob, bob_session, "seven eight")
    settled(node)
    b_in, b_out = spent(node, "user:bob")
    assert metric_tokens(node)[(MODEL, "input")] == a_in + b_in
    assert metric_tokens(node)[(MODEL, "output")] == a_out + b_out


def metric_tokens(node: HttpNode) -> dict[tuple[str, str], float]:
    """``reel_tokens_total`` by (model, kind), as a scrape of ``/metrics`` reads it."""
    body = node.call("GET", "/metrics").body.decode()
    (family,) = [f for f in text_string_to_metric_families(body) if f.name == "reel_tokens"]
    return {(s.labels["model"], s.labels["kind"]): s.value for s in family.samples}


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?by=tool", "query.by"),
        ("?by=", "query.by"),
        ("?from=2026-13-01", "query.from"),
        ("?to=yesterday", "query.to"),
        ("?from=2026-02-30", "query.from"),
        ("?from=2026-05-02&to=2026-05-01", "query.from"),
    ],
)
def test_bad_usage_queries_name_the_parameter(node: HttpNode, query: str, field: str) -> None:
    reply = usage(node, query)
    assert reply.status == 400, reply
    assert reply.error["field"] == field


def test_unpriced_models_have_no_cost(node: HttpNode) -> None:
    node.finish(node.start("hello"))
    settled(node)
    row = usage(node, "?by=model").json()["rows"][0]
    assert (row["key"], row["cost"], row["unpriced"]) == ("unknown", None, ["unknown"])


def refusals(node: HttpNode) -> list[tuple[str, BudgetRefused]]:
    rows = node.runtime.journal.events_of_kinds(kinds_of(BudgetRefused))
    out = []
    for row in rows:
        event = row.decode()
        assert isinstance(event, BudgetRefused)
        out.append((row.principal, event))
    return out


def test_hard_budgets_refuse_a_run_before_it_starts(data_dir: Path) -> None:
    budgets = {
        "alice-runs": Budget(
            scope="principal", subject="user:alice", measure="runs", period="hour", hard=2
        ),
        "agents-tokens": Budget(
            scope="role", subject="agent", measure="tokens", period="day", hard=1
        ),
    }
    node = open_node(data_dir, budgets=budgets)
    try:
        alice, bob = token(node, "user:alice"), token(node, "user:bob")
        session = session_of(node, alice)
        run_as(node, alice, session)  # nothing used yet: accepted
        settled(node)
        refused = send(node, alice, session, "again")
        assert refused.status == 429, refused
        error = refused.error
        assert error["code"] == "budget_exceeded"
        assert (
            "budget agents-tokens (role agent, for user:alice: tokens per day)" in error["message"]
        )
        ((who, event),) = refusals(node)
        assert who == "user:alice"  # recorded as the sender's act
        assert (event.budget, event.scope, event.subject, event.counted, event.measure) == (
            "agents-tokens",
            "role",
            "agent",
            "user:alice",
            "tokens",
        )
        assert (event.session_id, event.period_key, event.limit) == (session, today(), 1)
        assert event.used >= 1
        runs = node.call("GET", f"/v1/sessions/{session}/runs").json()["items"]
        assert len(runs) == 1  # no run was accepted for the refused message

        # The role's budget counts each member on its own: bob has used nothing.
        bob_session = session_of(node, bob)
        run_as(node, bob, bob_session)
        # An admin is no agent: its runs are not counted against the role's budget.
        node.finish(node.start("admin's run"))
    finally:
        close_node(node)


def test_runs_per_hour(data_dir: Path) -> None:
    budgets = {
        "two-an-hour": Budget(
            scope="principal", subject="admin", measure="runs", period="hour", hard=2
        )
    }
    node = open_node(data_dir, budgets=budgets)
    try:
        session = node.session()
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime())
        for _ in range(2):
            node.finish(node.start("hi", session))
        settled(node)
        if time.strftime("%Y-%m-%dT%H", time.gmtime()) != hour:
            pytest.skip("the runs straddled an hour boundary")
        third = node.call("POST", f"/v1/sessions/{session}/messages", {"text": "hi"})
        assert third.status == 429 and "budget two-an-hour" in third.error["message"]
        ((_, event),) = refusals(node)
        assert (event.measure, event.used, event.limit) == ("runs", 2, 2)
        assert event.period_key == time.strftime("%Y-%m-%dT%H", time.gmtime())
    finally:
        close_node(node)


def test_a_run_crossing_a_hard_budget_ends_at_the_next_turn_boundary(data_dir: Path) -> None:
    node = open_node(data_dir, budgets={})
    session = node.session()
    close_node(node)
    budgets = {
        "session-cap": Budget(
            scope="session", subject=session, measure="tokens", period="day", hard=1
        )
    }
    node = open_node(data_dir, budgets=budgets)
    try:
        run_id = node.start('/tool-loop echo {"text": "again"}', session)
        events = node.finish(run_id)
        assert events[-1].event == "run.failed"
        failed = [
            e
            for row in node.runtime.journal.events_of_kinds(kinds_of(RunFailed))
            if isinstance(e := row.decode(), RunFailed) and e.run_id == run_id
        ]
        (event,) = failed
        assert event.reason == "budget_exceeded"
        assert "budget session-cap (session " in event.message
        assert event.turns == 1  # the first turn ran; the second was never asked for
        # The next message in the session is refused before it starts.
        settled(node)
        assert node.call("POST", f"/v1/sessions/{session}/messages", {"text": "more"}).status == 429
        # Another session is not counted against this one's budget.
        node.finish(node.start("elsewhere"))
    finally:
        close_node(node)


def test_a_policy_reads_context_usage_today(data_dir: Path) -> None:
    policies = data_dir / "policies"
    policies.mkdir(parents=True, exist_ok=True, mode=0o700)
    (policies / "usage.cedar").write_text(
        '@id("ops.usage_cap")\n'
        'forbid (principal, action == Action::"tool.execute", resource)\n'
        "when { context.usage_today.tokens > 0 && context.usage_today.runs >= 1 };\n"
    )
    node = open_node(data_dir)
    try:
        session = node.session()
        node.finish(node.start("spend some tokens", session))
        settled(node)
        run_id = node.start(TOOL, session)
        node.finish(run_id)
        decided = [
            e
            for row in node.runtime.journal.events_of_kinds(kinds_of(ToolDecided))
            if isinstance(e := row.decode(), ToolDecided) and e.run_id == run_id
        ]
        (decision,) = decided
        assert decision.outcome == "deny"
        assert "usage.ops.usage_cap" in decision.policy_ids, decision.policy_ids
    finally:
        close_node(node)


def test_a_soft_limit_raises_one_incident_per_budget_and_period(data_dir: Path) -> None:
    budgets = {
        "admin-soft": Budget(
            scope="principal", subject="admin", measure="tokens", period="day", soft=1
        )
    }
    node = open_node(data_dir, budgets=budgets, watchdog=WatchdogSection(interval_s=0.1))
    try:
        node.finish(node.start("first"))

        def opened() -> list[Any] | None:
            items: list[Any] = node.call("GET", "/v1/incidents?domain=budget").json()["items"]
            return items or None

        (incident,) = eventually(opened)
        assert incident["state"] == "open"
        assert incident["subject"] == f"admin-soft.{today()}.admin"
        evidence = incident["evidence"]
        assert (evidence["measure"], evidence["limit"], evidence["unit"]) == (
            "tokens_per_day",
            1,
            "tokens",
        )
        assert "budget admin-soft (principal admin: tokens per day)" in evidence["detail"]
        for _ in range(3):  # more runs, more looks: still the one incident
            node.finish(node.start("more"))
        watchdog = node.runtime.node.watchdog
        assert watchdog is not None
        looks = watchdog.proxy().looks.get()
        eventually(lambda: watchdog.proxy().looks.get() >= looks + 3)
        items = node.call("GET", "/v1/incidents?domain=budget").json()["items"]
        assert [i["incident_id"] for i in items] == [incident["incident_id"]]
        # A soft limit refuses nothing.
        assert not refusals(node)
    finally:
        close_node(node)


def test_the_view_is_the_same_after_a_restart_and_a_rebuild(data_dir: Path) -> None:
    config: dict[str, Any] = {
        "provider": ProviderConfig(model=MODEL),
        "usage": UsageSection(prices=PRICES),
    }
    node = open_node(data_dir, **config)
    try:
        for text in ("one", "two three", TOOL):
            node.finish(node.start(text))
        settled(node)
        before = {by: usage(node, f"?by={by}").json() for by in ("principal", "session", "model")}
    finally:
        close_node(node)
    assert before["model"]["total"]["tokens"] > 0
    node = open_node(data_dir, **config)  # views.db kept
    try:
        settled(node)
        kept = {by: usage(node, f"?by={by}").json() for by in ("principal", "session", "model")}
    finally:
        close_node(node)
    for name in ("views.db", "views.db-wal", "views.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    node = open_node(data_dir, **config)  # rebuilt from the journal alone
    try:
        node.runtime.projector.wait_caught_up()
        settled(node)
        rebuilt = {by: usage(node, f"?by={by}").json() for by in ("principal", "session", "model")}
    finally:
        close_node(node)
    assert before == kept == rebuilt
