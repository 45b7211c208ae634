"""``context.usage_today`` in a tool call's Cedar context (docs/usage.md): an operator policy
reads it, the same call is allowed below the line and denied above it, and a malformed value is
refused naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import PolicyEngine, PolicyRequestError, ToolRequest, UsageToday
from tests.policies.conftest import write_policies

CAP = """\
@id("cap")
forbid (principal, action == Action::"tool.execute", resource)
when { context.usage_today.tokens > 1000 || context.usage_today.cost_micros >= 5000000 };
"""


def call(usage: UsageToday) -> ToolRequest:
    return ToolRequest(
        principal="user:alice",
        tool="echo",
        capabilities=(),
        risk="low",
        posture="always_allow",
        session_id="s1",
        run_id="r1",
        usage_today=usage,
    )


@pytest.fixture
def engine(operator_dir: Path) -> PolicyEngine:
    return PolicyEngine.load(write_policies(operator_dir, {"usage.cedar": CAP}))


def test_a_policy_decides_by_usage_today(engine: PolicyEngine) -> None:
    assert engine.decide(call(UsageToday())).outcome == "allow"
    assert engine.decide(call(UsageToday(tokens=1000, cost_micros=4_999_999))).outcome == "allow"
    over = engine.decide(call(UsageToday(tokens=1001)))
    assert (over.outcome, over.policy_ids) == ("deny", ("usage.cap",))
    assert engine.decide(call(UsageToday(cost_micros=5_000_000))).outcome == "deny"


def test_the_baseline_ignores_usage(operator_dir: Path) -> None:
    engine = PolicyEngine.load(operator_dir)
    assert engine.decide(call(UsageToday(tokens=10**12, runs=10**6))).outcome == "allow"


def test_a_malformed_usage_is_refused_naming_it(engine: PolicyEngine) -> None:
    bad = ToolRequest(
        principal="user:alice",
        tool="echo",
        capabilities=(),
        risk="low",
        posture="always_allow",
        usage_today={"tokens": 1},  # type: ignore[arg-type]
    )
    with pytest.raises(PolicyRequestError) as caught:
        engine.decide(bad)
    assert caught.value.field == "usage_today"
