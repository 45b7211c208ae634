"""The decision table: tool x posture x operator policy x principal x cached grant -> outcome,
grant and the deciding policy ids, through the real gate, real Cedar and the real tool catalog.
A chat sender (no role) is among the principals: no call of its runs is allowed without a human,
whatever the posture, even where an operator policy names it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from actors.approvals.gate import ToolGate
from actors.approvals.grants import Grant
from policies import PolicyEngine
from tests.actors.approvals.test_always_grants import decided, revoked
from tools import ToolCatalog, ToolsConfig, build_catalog

OPS_POLICY = """
@id("shell")
permit (principal == Principal::"ops", action == Action::"tool.execute",
        resource == Tool::"shell.run");

@id("sender")
permit (principal == Principal::"channel:hook:@mallory:localhost",
        action == Action::"tool.execute", resource);
"""
STRANGER = "channel:hook:@mallory:localhost"
SENSITIVE = {"fs.write", "shell.run", "http.fetch"}
TOOLS = ("echo", "fs.read", "fs.write", "shell.run", "http.fetch")
POSTURES = (None, "always_allow", "ask_each_time", "disabled")
GRANTS = (None, "session", "always")
SAMPLE: dict[str, dict[str, object]] = {
    "echo": {"text": "a"},
    "fs.read": {"path": "a"},
    "fs.write": {"path": "a", "content": ""},
    "shell.run": {"argv": ["echo"]},
    "http.fetch": {"url": "https://example.com/"},
}


def expected(
    tool: str, posture: str, operator: bool, principal: str, grant: str | None
) -> tuple[str, str | None, str]:
    """The rules of docs/policy.md, written out independently of the engine."""
    if posture == "disabled":
        return "deny", None, "baseline.posture_disabled"
    if principal == STRANGER:
        if grant is not None:
            return "allow", grant, "baseline.tool.approved"
        return "approval_required", None, "baseline.tool.approved"
    if operator and principal == "ops" and tool == "shell.run" and posture == "always_allow":
        return "allow", None, "ops.shell"
    if posture == "always_allow" and tool not in SENSITIVE:
        return "allow", None, "baseline.tool.low_risk"
    if grant is not None:
        return "allow", grant, "baseline.tool.approved"
    return "approval_required", None, "baseline.tool.approved"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> ToolCatalog:
    ws = tmp_path_factory.mktemp("ws")
    return build_catalog(ToolsConfig(workspace_dir=str(ws)))


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, PolicyEngine]:
    ops: Path = tmp_path_factory.mktemp("policies")
    (ops / "ops.cedar").write_text(OPS_POLICY)
    return {False: PolicyEngine.load(None), True: PolicyEngine.load(ops)}


CASES = list(itertools.product(TOOLS, POSTURES, (False, True), ("ops", "alice", STRANGER), GRANTS))


@pytest.mark.parametrize(("tool", "posture", "operator", "principal", "grant"), CASES)
def test_decision_table(
    catalog: ToolCatalog,
    engines: dict[bool, PolicyEngine],
    tool: str,
    posture: str | None,
    operator: bool,
    principal: str,
    grant: str | None,
) -> None:
    spec = catalog.spec(tool)
    gate = ToolGate(engines[operator])
    if grant == "always":
        gate.fold(decided(principal=principal, tool=tool))
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


def test_grant_for_another_principal_does_not_apply(
    catalog: ToolCatalog, engines: dict[bool, PolicyEngine]
) -> None:
    gate = ToolGate(engines[False])
    gate.fold(decided(principal="alice"))
    decision = gate.decide(catalog.spec("shell.run"), principal="bob", session_id="s", run_id="r")
    assert decision.outcome == "approval_required"
    gate.fold(revoked(principal="alice"))
    again = gate.decide(catalog.spec("shell.run"), principal="alice", session_id="s", run_id="r")
    assert again.outcome == "approval_required"


def test_a_chat_sender_is_held_back_by_name_and_a_role_lifts_it(
    catalog: ToolCatalog, engines: dict[bool, PolicyEngine]
) -> None:
    spec = catalog.spec("fs.read")  # always_allow and not sensitive: anyone else just runs it
    held = ToolGate(engines[True]).decide(spec, principal=STRANGER, session_id="s", run_id="r")
    assert held.outcome == "approval_required" and held.posture == "always_allow"
    assert "chat sender with no role" in held.reason
    assert "baseline.tool.stranger" in held.reason
    # a role (no token can give one to a sender today) makes it no stranger
    member = ToolGate(engines[False], roles_of=lambda _p: ("viewer",))
    decided = member.decide(spec, principal=STRANGER, session_id="s", run_id="r")
    assert decided.outcome == "allow" and decided.policy_ids == ("baseline.tool.low_risk",)
    # a principal that only looks like one is not a sender
    other = ToolGate(engines[False]).decide(spec, principal="channelx", session_id="s", run_id="r")
    assert other.outcome == "allow"
