"""The decision table: tool x posture x approved x operator policy -> outcome and ids.

Expectations are written out, not computed: the baseline table lists every
(tool, posture, approved) cell, and each operator policy set lists only the cells it
changes, so every other cell asserts that the operator file changed nothing there.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from policies import Decision, Outcome, PolicyEngine, ToolRequest

TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "echo": ((), "low"),
    "fs.read": (("fs.read",), "medium"),
    "fs.write": (("fs.write",), "high"),
    "shell.run": (("process.exec",), "critical"),
    "http.fetch": (("net.egress",), "medium"),
    "secrets.get": (("secrets.read",), "low"),
    "memory.purge": ((), "high"),
}
"""name -> (capabilities, risk). http.fetch and secrets.get are sensitive by capability
alone, memory.purge by risk alone."""

ALLOW: Outcome = "allow"
DENY: Outcome = "deny"
ASK: Outcome = "approval_required"
LOW_RISK = "baseline.tool.low_risk"
APPROVED = "baseline.tool.approved"
DISABLED = "baseline.posture_disabled"
OPS_SHELL = "permit_shell.ops_shell"
NO_HTTP = "forbid_http.no_http"

Cell = tuple[Outcome, tuple[str, ...]]

_NOT_SENSITIVE: dict[tuple[str, bool], Cell] = {
    ("always_allow", False): (ALLOW, (LOW_RISK,)),
    ("always_allow", True): (ALLOW, (APPROVED, LOW_RISK)),
    ("ask_each_time", False): (ASK, (APPROVED,)),
    ("ask_each_time", True): (ALLOW, (APPROVED,)),
    ("disabled", False): (DENY, (DISABLED,)),
    ("disabled", True): (DENY, (DISABLED,)),
}
_SENSITIVE: dict[tuple[str, bool], Cell] = {
    ("always_allow", False): (ASK, (APPROVED,)),
    ("always_allow", True): (ALLOW, (APPROVED,)),
    ("ask_each_time", False): (ASK, (APPROVED,)),
    ("ask_each_time", True): (ALLOW, (APPROVED,)),
    ("disabled", False): (DENY, (DISABLED,)),
    ("disabled", True): (DENY, (DISABLED,)),
}
BASELINE: dict[str, dict[tuple[str, bool], Cell]] = {
    "echo": _NOT_SENSITIVE,
    "fs.read": _NOT_SENSITIVE,
    "fs.write": _SENSITIVE,
    "shell.run": _SENSITIVE,
    "http.fetch": _SENSITIVE,
    "secrets.get": _SENSITIVE,
    "memory.purge": _SENSITIVE,
}

OVERRIDES: dict[str, dict[tuple[str, str, bool], Cell]] = {
    "none": {},
    "permit_shell": {
        ("shell.run", "always_allow", False): (ALLOW, (OPS_SHELL,)),
        ("shell.run", "always_allow", True): (ALLOW, (OPS_SHELL, APPROVED)),
        # ask_each_time is a forbid until approved: the operator permit cannot skip it.
        ("shell.run", "ask_each_time", False): (ASK, (APPROVED, OPS_SHELL)),
        ("shell.run", "ask_each_time", True): (ALLOW, (APPROVED, OPS_SHELL)),
    },
    "forbid_http": {
        ("http.fetch", "always_allow", False): (DENY, (NO_HTTP,)),
        ("http.fetch", "always_allow", True): (DENY, (NO_HTTP,)),
        ("http.fetch", "ask_each_time", False): (DENY, (NO_HTTP,)),
        ("http.fetch", "ask_each_time", True): (DENY, (NO_HTTP,)),
        ("http.fetch", "disabled", False): (DENY, (DISABLED, NO_HTTP)),
        ("http.fetch", "disabled", True): (DENY, (DISABLED, NO_HTTP)),
    },
}


def _table() -> list[object]:
    rows: list[object] = []
    for operator, overrides in OVERRIDES.items():
        for tool, cells in BASELINE.items():
            for (posture, approved), cell in cells.items():
                outcome, ids = overrides.get((tool, posture, approved), cell)
                rows.append(
                    pytest.param(
                        operator,
                        tool,
                        posture,
                        approved,
                        outcome,
                        tuple(sorted(ids)),
                        id=f"{operator}-{tool}-{posture}-{'approved' if approved else 'fresh'}",
                    )
                )
    return rows


def _request(tool: str, posture: str, approved: bool, principal: str = "ops") -> ToolRequest:
    capabilities, risk = TOOLS[tool]
    return ToolRequest(
        principal=principal,
        tool=tool,
        capabilities=capabilities,
        risk=risk,
        posture=posture,
        channel="cli",
        session_id="01SESSION",
        run_id="01RUN",
        approved=approved,
    )


def test_every_override_names_a_cell_of_the_table() -> None:
    for overrides in OVERRIDES.values():
        for tool, posture, approved in overrides:
            assert (posture, approved) in BASELINE[tool]


@pytest.mark.parametrize(
    ("operator", "tool", "posture", "approved", "outcome", "policy_ids"), _table()
)
def test_decision_table(
    engine_for: Callable[[str], PolicyEngine],
    operator: str,
    tool: str,
    posture: str,
    approved: bool,
    outcome: str,
    policy_ids: tuple[str, ...],
) -> None:
    decision = engine_for(operator).decide(_request(tool, posture, approved))
    assert (decision.outcome, decision.policy_ids) == (outcome, policy_ids)
    assert decision.errors == ()


def test_operator_permit_applies_only_to_its_principal(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    decision = engine_for("permit_shell").decide(
        _request("shell.run", "always_allow", False, principal="alice")
    )
    assert decision.outcome == ASK
    assert decision.policy_ids == (APPROVED,)


@pytest.mark.parametrize(
    ("tool", "posture", "reason"),
    [
        ("echo", "always_allow", "permitted by baseline.tool.low_risk"),
        ("echo", "disabled", "forbidden by baseline.posture_disabled"),
        (
            "shell.run",
            "always_allow",
            "approval required: tool has capability process.exec, tool risk is critical",
        ),
        ("http.fetch", "always_allow", "approval required: tool has capability net.egress"),
        ("memory.purge", "always_allow", "approval required: tool risk is high"),
        (
            "echo",
            "ask_each_time",
            "approval required: tool posture is ask_each_time"
            " (held back by baseline.posture_ask_each_time)",
        ),
    ],
)
def test_reasons_say_why(
    engine_for: Callable[[str], PolicyEngine], tool: str, posture: str, reason: str
) -> None:
    assert engine_for("none").decide(_request(tool, posture, False)).reason == reason


def test_approved_sensitive_call_under_a_forbid_is_denied_with_the_forbid(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    decision = engine_for("forbid_http").decide(_request("http.fetch", "always_allow", True))
    assert decision == Decision(
        outcome=DENY, policy_ids=(NO_HTTP,), reason="forbidden by forbid_http.no_http"
    )


def test_decisions_repeat_for_the_same_request(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    engine = engine_for("none")
    request = _request("shell.run", "always_allow", False)
    assert {engine.decide(request) for _ in range(3)} == {engine.decide(request)}
