"""The decision table: tool x posture x operator policy x cached grant -> outcome, grant and the
deciding policy ids, through the real gate, real Cedar and the real tool catalog."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from actors.gate import ToolGate
from actors.grants import Grant
from policies import PolicyEngine
from tools import ToolsConfig, build_catalog

OPS_POLICY = """
@id("shell")
permit (principal == Principal::"ops", action == Action::"tool.execute",
        resource == Tool::"shell.run");
"""
SENSITIVE = {"fs.write", "shell.run", "http.fetch"}
TOOLS = ("echo", "fs.read", "fs.write", "shell.run", "http.fetch")
POSTURES = (None, "always_allow", "ask_each_time", "disabled")
GRANTS = (None, "session", "always")
SAMPLE = {
    "echo": {"text": "a"},
    "fs.read": {"path": "a"},
    "fs.write": {"path": "a", "content": ""},
    "shell.run": {"argv": ["echo"]},
    "http.fetch": {"url": "https://example.com/"},
}


def expected(tool: str, posture: str, operator: bool, principal: str, grant: str | None):
    """The rules of docs/policy.md, written out independently of the engine."""
    if posture == "disabled":
        return "deny", None, "baseline.posture_disabled"
    if operator and principal == "ops" and tool == "shell.run" and posture == "always_allow":
        return "allow", None, "ops.shell"
    if posture == "always_allow" and tool not in SENSITIVE:
        return "allow", None, "baseline.tool.low_risk"
    if grant is not None:
        return "allow", grant, "baseline.tool.approved"
    return "approval_required", None, "baseline.tool.approved"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory):
    ws = tmp_path_factory.mktemp("ws")
    return build_catalog(ToolsConfig(workspace_dir=str(ws)))


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, PolicyEngine]:
    ops: Path = tmp_path_factory.mktemp("policies")
    (ops / "ops.cedar").write_text(OPS_POLICY)
    return {False: PolicyEngine.load(None), True: PolicyEngine.load(ops)}


CASES = list(itertools.product(TOOLS, POSTURES, (False, True), ("ops", "alice"), GRANTS))


@pytest.mark.parametrize(("tool", "posture", "operator", "principal", "grant"), CASES)
def test_decision_table(catalog, engines, tool, posture, operator, principal, grant) -> None:
    spec = catalog.spec(tool)
    gate = ToolGate(engines[operator])
    if grant == "always":
        gate.grant_always(principal, tool)
    overrides = {tool: posture} if posture is not None else None
    decision = gate.decide(
        spec,
        args=catalog.validate(tool, SAMPLE[tool]),
        principal=principal,
        session_id="s",
        run_id="r",
        session_grants=(Grant(tool=tool),) if grant == "session" else (),
        posture_overrides=overrides,
    )
    effective = posture or spec.default_posture
    outcome, used_grant, policy = expected(tool, effective, operator, principal, grant)
    assert decision.outcome == outcome
    assert decision.grant == used_grant
    assert decision.posture == effective
    assert policy in decision.policy_ids


def test_grant_for_another_principal_does_not_apply(catalog, engines) -> None:
    gate = ToolGate(engines[False])
    gate.grant_always("alice", "shell.run")
    decision = gate.decide(catalog.spec("shell.run"), principal="bob", session_id="s", run_id="r")
    assert decision.outcome == "approval_required"
    assert gate.revoke_always("alice", "shell.run")
    again = gate.decide(catalog.spec("shell.run"), principal="alice", session_id="s", run_id="r")
    assert again.outcome == "approval_required"
