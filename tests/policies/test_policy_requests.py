"""Non-tool actions, malformed requests, and the package's public surface."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest

import policies
from policies import PolicyEngine, PolicyRequestError, ToolRequest


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"principal": ""}, "principal"),
        ({"tool": ""}, "tool"),
        ({"risk": "extreme"}, "risk"),
        ({"posture": "sometimes"}, "posture"),
        ({"capabilities": ("fs.read", "gpu.use")}, "capabilities"),
        ({"capabilities": ["fs.read"]}, "capabilities"),
        ({"channel": ""}, "channel"),
        ({"approved": "yes"}, "approved"),
        ({"session_id": None}, "session_id"),
    ],
)
def test_malformed_requests_name_the_field(
    engine_for: Callable[[str], PolicyEngine], changes: dict[str, object], field: str
) -> None:
    request = ToolRequest(
        principal="alice",
        tool="fs.read",
        capabilities=("fs.read",),
        risk="medium",
        posture="always_allow",
    )
    with pytest.raises(PolicyRequestError) as caught:
        engine_for("none").decide(msgspec.structs.replace(request, **changes))
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")


def test_unusual_identifiers_are_data_not_syntax(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    decision = engine_for("none").decide(
        ToolRequest(
            principal='al"ice\nx',
            tool='weird"tool',
            capabilities=(),
            risk="low",
            posture="always_allow",
            channel='ch"an',
            session_id="s\\1",
            run_id='"',
        )
    )
    assert (decision.outcome, decision.errors) == ("allow", ())


def test_describe_lists_outcome_policies_and_reason(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    decision = engine_for("none").decide(
        ToolRequest(principal="alice", tool="echo", capabilities=(), risk="low", posture="disabled")
    )
    assert decision.describe() == (
        "deny\npolicies: baseline.posture_disabled\nreason: forbidden by baseline.posture_disabled"
    )


def test_public_names_are_complete() -> None:
    public = {name for name in vars(policies) if not name.startswith("_")}
    modules = {"access", "context_reads", "decision", "engine", "errors", "loader", "request"}
    assert set(policies.__all__) == public - modules
