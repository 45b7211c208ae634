"""API actions: the built-in roles against every action, ownership for agents, operator
forbids on ``approval.resolve``, malformed requests, and the decision cache."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from policies import PolicyEngine, PolicyRequestError
from policies.access import ACTIONS, ROLES, SCOPES, AccessRequest

from .conftest import write_policies

READS = {a for a in ACTIONS if a.endswith((".read", ".list")) and not a.startswith("vault.")}
"""Every read but the vault's list of names: that is for admins only (docs/vault.md)."""
ALICE, BOB = "user:alice", "user:bob"
SCHEDULING = {"schedule.create", "schedule.manage"}
"""Operators and agents schedule runs as themselves only (``runs_as`` is the owner here);
admins as anyone (docs/schedules.md)."""

ALLOWED: dict[str, set[str]] = {
    "admin": set(ACTIONS),
    "operator": READS
    | {"session.create", "session.reset", "run.start", "run.cancel", "approval.resolve"}
    | {"grant.revoke"}
    | {"session.compact", "session.restore"}
    | {"memory.write", "memory.delete"}
    | {"task.cancel"}
    | {"workspace.restore"}
    | {"learning.review"}
    | {"channel.route", "channel.pair"}
    | SCHEDULING,
    "approver": READS | {"approval.resolve", "grant.revoke", "learning.review"},
    "viewer": set(READS),
    "agent": {
        "session.create",
        "session.list",
        "run.list",
        "approval.list",
        "tool.list",
        "memory.list",
        # in its own sessions only (memory: its own items; the "scope" below is not global):
        "session.read",
        "session.reset",
        "session.compact",
        "session.restore",
        "run.start",
        "run.read",
        "run.cancel",
        "approval.read",
        "memory.read",
        "memory.write",
        "memory.delete",
        *SCHEDULING,
        "usage.read",  # its own (baseline.usage.own)
    },
}
"""What each role may do in a session it owns (docs/policy.md has the same table)."""

OWNED_ONLY = {
    "session.read",
    "session.reset",
    "session.compact",
    "session.restore",
    "run.start",
    "run.read",
    "run.cancel",
    "approval.read",
    "memory.read",
    "memory.write",
    "memory.delete",
    "usage.read",
}


def context_for(action: str, owner: str, run_principal: str = BOB) -> dict[str, str]:
    values = {
        "session_id": "s1",
        "owner": owner,
        "run_id": "r1",
        "run_principal": run_principal,
        "approval_id": "a1",
        "tool": "shell.run",
        "risk": "high",
        "decision": "allow",
        "scope": "once",
        "match": "any",
        "posture": "always_allow",
        "grant_principal": owner,
        "item_id": "m1",
        "task_id": "t1",
        "kind": "noop",
        "candidate_id": "c1",
        "concerns": owner,
        # a command no baseline grants a sender (status, stop and reset of its own are:
        # tests/transports/channels)
        "command": "approve",
        "conversation": "c1",
        "status": "pending",
        "name": "deploy_key",
        "operation": "set",
        "runs_as": owner,
        "of": owner,
    }
    return {k: values[k] for k in SCOPES[ACTIONS[action].scope]}


def ask(
    engine: PolicyEngine, role: str | None, action: str, owner: str = BOB, principal: str = ALICE
) -> str:
    request = AccessRequest(
        principal=principal,
        roles=(role,) if role else (),
        action=action,
        resource_id="x",
        context=context_for(action, owner),
    )
    return engine.authorize(request).outcome


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("role", sorted(ROLES))
def test_roles_by_actions_in_someone_elses_session(
    engine_for: Callable[[str], PolicyEngine], role: str, action: str
) -> None:
    owned_only = (role == "agent" and action in OWNED_ONLY) or (
        role != "admin" and action in SCHEDULING
    )
    expected = action in ALLOWED[role] and not owned_only
    assert ask(engine_for("none"), role, action, owner=BOB) == ("allow" if expected else "deny")


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("role", sorted(ROLES))
def test_roles_by_actions_in_their_own_session(
    engine_for: Callable[[str], PolicyEngine], role: str, action: str
) -> None:
    expected = action in ALLOWED[role]
    assert ask(engine_for("none"), role, action, owner=ALICE) == ("allow" if expected else "deny")


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_a_principal_without_a_role_may_do_nothing(
    engine_for: Callable[[str], PolicyEngine], action: str
) -> None:
    decision = engine_for("none").authorize(
        AccessRequest(principal=ALICE, roles=(), action=action, context=context_for(action, ALICE))
    )
    assert (decision.outcome, decision.policy_ids) == ("deny", ())
    assert decision.reason == f"denied by default: no policy permits {action}"


def test_tool_execute_is_not_an_api_action_even_for_admins(
    engine_for: Callable[[str], PolicyEngine],
) -> None:
    assert "tool.execute" not in ACTIONS
    with pytest.raises(PolicyRequestError) as caught:
        engine_for("none").authorize(
            AccessRequest(principal="admin", roles=("admin",), action="tool.execute")
        )
    assert caught.value.field == "action"


def test_the_deciding_policies_are_named(engine_for: Callable[[str], PolicyEngine]) -> None:
    engine = engine_for("none")
    read = engine.authorize(
        AccessRequest(principal=ALICE, roles=("viewer",), action="journal.read", resource_id="j")
    )
    assert read.policy_ids == ("baseline.read_only",)
    resolve = engine.authorize(
        AccessRequest(
            principal=ALICE,
            roles=("approver",),
            action="approval.resolve",
            context=context_for("approval.resolve", BOB),
        )
    )
    assert resolve.policy_ids == ("baseline.approval.resolve",)


SELF_APPROVAL = """\
@id("no_self_shell")
forbid (principal, action == Action::"approval.resolve", resource)
when { context.run_principal == principal && context.tool == "shell.run" };

@id("critical_by_approvers")
forbid (principal, action == Action::"approval.resolve", resource)
when { context.risk == "critical" && context.decision == "allow" }
unless { principal in Role::"approver" };
"""


def test_operator_forbids_on_approval_resolve_take_effect(tmp_path: Path) -> None:
    engine = PolicyEngine.load(write_policies(tmp_path / "policies", {"mine.cedar": SELF_APPROVAL}))

    def resolve(
        role: str, run_principal: str, tool: str, risk: str, decision: str
    ) -> tuple[str, tuple[str, ...]]:
        context = context_for("approval.resolve", BOB, run_principal)
        context.update(tool=tool, risk=risk, decision=decision)
        answer = engine.authorize(
            AccessRequest(
                principal=ALICE, roles=(role,), action="approval.resolve", context=context
            )
        )
        return answer.outcome, answer.policy_ids

    assert resolve("operator", BOB, "shell.run", "high", "allow") == (
        "allow",
        ("baseline.approval.resolve",),
    )
    assert resolve("operator", ALICE, "shell.run", "high", "allow") == (
        "deny",
        ("mine.no_self_shell",),
    )
    assert resolve("admin", ALICE, "shell.run", "high", "deny") == ("deny", ("mine.no_self_shell",))
    assert resolve("operator", ALICE, "http.fetch", "high", "allow")[0] == "allow"
    assert resolve("operator", BOB, "x", "critical", "allow") == (
        "deny",
        ("mine.critical_by_approvers",),
    )
    assert resolve("operator", BOB, "x", "critical", "deny")[0] == "allow"
    assert resolve("approver", BOB, "x", "critical", "allow")[0] == "allow"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"action": "session.delete"}, "action"),
        ({"principal": ""}, "principal"),
        ({"roles": ("root",)}, "roles"),
        ({"resource_id": ""}, "resource_id"),
        ({"context": {}}, "context.session_id"),
        ({"context": {"session_id": "s", "owner": 3}}, "context.owner"),
        ({"context": {"session_id": "s", "owner": ALICE, "colour": "red"}}, "context.colour"),
    ],
)
def test_malformed_requests_name_the_field(
    engine_for: Callable[[str], PolicyEngine], changes: dict[str, object], field: str
) -> None:
    fields: dict[str, object] = {
        "principal": ALICE,
        "roles": ("viewer",),
        "action": "session.read",
        "resource_id": "s",
        "context": {"session_id": "s", "owner": ALICE},
    }
    fields.update(changes)
    with pytest.raises(PolicyRequestError) as caught:
        engine_for("none").authorize(AccessRequest(**fields))  # type: ignore[arg-type]
    assert caught.value.field == field


def test_decisions_are_cached_and_stay_equal(engine_for: Callable[[str], PolicyEngine]) -> None:
    engine = engine_for("none")
    request = AccessRequest(
        principal=ALICE, roles=("agent",), action="run.read", context=context_for("run.read", ALICE)
    )
    first = engine.authorize(request)
    assert engine.authorize(request) is first
    other = AccessRequest(
        principal=ALICE, roles=("agent",), action="run.read", context=context_for("run.read", BOB)
    )
    assert engine.authorize(other).outcome == "deny" and first.outcome == "allow"


def doc_policies() -> list[tuple[str, str]]:
    """Every ``cedar`` block of docs/*.md: (where, text)."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    found = []
    for path in sorted(docs.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for n, block in enumerate(re.findall(r"```cedar\n(.*?)```", text, flags=re.S)):
            found.append((f"{path.name}#{n + 1}", block))
    return found


def test_the_docs_show_cedar_policies() -> None:
    assert len(doc_policies()) >= 8


@pytest.mark.parametrize(("where", "text"), doc_policies(), ids=[w for w, _ in doc_policies()])
def test_every_policy_the_docs_show_loads_as_an_operator_file(
    tmp_path: Path, where: str, text: str
) -> None:
    """An example an operator copies must parse and validate against the schema."""
    engine = PolicyEngine.load(write_policies(tmp_path / "policies", {"example.cedar": text}))
    assert any(p.startswith("example.") for p in engine.policy_ids), where


def test_viewers_can_be_kept_to_what_was_learned_about_themselves(tmp_path: Path) -> None:
    (text,) = [t for _, t in doc_policies() if "viewers-read-their-own-learning" in t]
    engine = PolicyEngine.load(write_policies(tmp_path / "policies", {"learning.cedar": text}))

    def read(roles: tuple[str, ...], concerns: str) -> str:
        context = context_for("learning.read", BOB) | {"concerns": concerns}
        request = AccessRequest(
            principal=ALICE, roles=roles, action="learning.read", resource_id="c", context=context
        )
        return engine.authorize(request).outcome

    assert read(("viewer",), BOB) == "deny"
    assert read(("viewer",), ALICE) == "allow"
    assert read(("viewer", "approver"), BOB) == "allow"
    assert read(("operator",), BOB) == "allow"
    assert ask(PolicyEngine.load(None), "viewer", "learning.read") == "allow"  # the default
