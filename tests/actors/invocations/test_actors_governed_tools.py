"""Governed tools end to end: posture, Cedar decisions, approvals, grants, time-outs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from actors import (
    ActorsConfig,
    ApprovalAlreadyResolved,
    RunBudgets,
    UnknownApproval,
)
from actors.messages import (
    CancelRun,
    GetSessionState,
    ResetSession,
    ResolveApproval,
)
from events import new_id
from events.catalog import ApprovalRequested, RunCancelled, RunCompleted
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import NodeKit
from tools import ToolsConfig

SHELL = '/tool shell.run {"argv": ["echo", "governed"]}'


def approval_of(kit: NodeKit, run_id: str) -> ApprovalRequested:
    request = kit.wait_for_approval(run_id)
    assert isinstance(request, ApprovalRequested)
    return request


def resolve(kit: NodeKit, approval_id: str, decision: str = "allow", **fields: Any) -> Any:
    return kit.ask(ResolveApproval(approval_id=approval_id, decision=decision, **fields))  # type: ignore[arg-type]


def decided(kit: NodeKit, run_id: str) -> Any:
    (decision,) = kit.events(run_id, "tool.decided")
    return decision


def test_decisions_name_the_policies_that_decided(kit: NodeKit) -> None:
    ticket, _ = kit.run('x\n/tool echo {"text": "a"}')
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "allow"
    assert decision.policy_ids == ("baseline.tool.low_risk",)
    assert decision.posture == "always_allow" and decision.grant is None


def test_a_sensitive_tool_waits_for_approval_then_runs(kit: NodeKit) -> None:
    ticket = kit.start_run(f"run it\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    assert request.tool == "shell.run" and request.risk == "critical"
    assert request.arguments == {"argv": ["echo", "governed"]}
    waiting = kit.wait_for_kind(ticket.run_id, "run.awaiting_approval")
    assert waiting.approval_id == request.approval_id
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "approval_required"
    assert decision.posture == "ask_each_time"
    assert kit.node.services.registry.pending_approvals() == [request.approval_id]

    assert resolve(kit, request.approval_id, scope="session", principal="alice") is True
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunCompleted)
    (resolved,) = kit.events(ticket.run_id, "tool.approval_resolved")
    assert (resolved.decision, resolved.scope, resolved.decided_by) == ("allow", "session", "alice")
    (row,) = [s for s in kit.stored(ticket.run_id) if s.kind == "tool.approval_resolved"]
    assert row.principal == "alice"  # the approver's act, not the run's principal's
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert done.ok and "governed" in done.output
    kinds = kit.kinds(ticket.run_id)
    assert kinds.index("run.awaiting_approval") < kinds.index("tool.approval_resolved")
    assert kinds.index("tool.approval_resolved") < kinds.index("run.resumed")
    assert kinds.index("run.resumed") < kinds.index("tool.completed")
    assert kit.node.services.registry.pending_approvals() == []


def test_a_request_shows_the_arguments_as_the_proposal_stores_them(kit: NodeKit) -> None:
    """The proposal is committed with its decision and request, which are decided from it
    before it is stored: a secret in the arguments is redacted alike in both, never kept."""
    secret = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
    ticket = kit.start_run(f'run it\n/tool shell.run {{"argv": ["echo", "{secret}"]}}')
    request = approval_of(kit, ticket.run_id)
    (proposed,) = kit.events(ticket.run_id, "tool.proposed")
    assert request.arguments == proposed.arguments
    assert secret not in json.dumps(request.arguments)
    assert request.arguments["argv"][0] == "echo"
    assert resolve(kit, request.approval_id, "deny") is True
    kit.wait_for_end(ticket.run_id)
    assert all(secret.encode() not in row.payload for row in kit.stored(ticket.run_id))


def _shell(*argv: str) -> str:
    import json

    return "/tool shell.run " + json.dumps({"argv": list(argv)})


def _asks(kit: NodeKit, text: str, session_id: str) -> bool:
    """Whether a run of ``text`` in the session asks a human (then it is denied)."""
    ticket = kit.start_run(text, session_id=session_id)
    for _ in range(400):
        kinds = kit.kinds(ticket.run_id)
        if "tool.approval_requested" in kinds:
            resolve(kit, approval_of(kit, ticket.run_id).approval_id, "deny")
            kit.wait_for_end(ticket.run_id)
            return True
        if "tool.decided" in kinds:
            kit.wait_for_end(ticket.run_id)
            return False
        time.sleep(0.01)
    raise AssertionError("the run neither asked nor decided")


def test_an_exact_session_grant_covers_only_the_approved_arguments(kit: NodeKit) -> None:
    first = kit.start_run("one\n" + _shell("echo", "a"))
    resolve(kit, approval_of(kit, first.run_id).approval_id, scope="session", match="exact")
    kit.wait_for_end(first.run_id)
    sid = first.session_id
    (resolved,) = kit.events(first.run_id, "tool.approval_resolved")
    assert resolved.match == "exact" and len(resolved.arguments_digest) == 32
    assert not _asks(kit, "again\n" + _shell("echo", "a"), sid)
    # key order, a default spelled out: the validated arguments are the same call
    assert not _asks(kit, 'same\n/tool shell.run {"cwd": null, "argv": ["echo", "a"]}', sid)
    assert _asks(kit, "other\n" + _shell("echo", "b"), sid)
    assert _asks(kit, "longer\n" + _shell("echo", "a", "b"), sid)


def test_a_prefix_session_grant_covers_calls_whose_argv_starts_with_it(kit: NodeKit) -> None:
    first = kit.start_run("one\n" + _shell("echo", "status", "-s"))
    request = approval_of(kit, first.run_id)
    resolve(kit, request.approval_id, scope="session", match="prefix", prefix="echo status")
    kit.wait_for_end(first.run_id)
    sid = first.session_id
    assert not _asks(kit, "two\n" + _shell("echo", "status"), sid)
    assert not _asks(kit, "three\n" + _shell("echo", "status", "--long"), sid)
    # component by component: "statusx" and "echo" alone are not under "echo status"
    assert _asks(kit, "four\n" + _shell("echo", "statusx"), sid)
    assert _asks(kit, "five\n" + _shell("echo"), sid)
    assert _asks(kit, "six\n" + _shell("echo", "status x"), sid)


def test_a_binding_the_decision_cannot_take_is_refused_naming_the_field(kit: NodeKit) -> None:
    from actors import InvalidCommand

    ticket = kit.start_run(f"one\n{SHELL}")
    approval_id = approval_of(kit, ticket.run_id).approval_id
    cases = [
        ({"scope": "once", "match": "exact"}, "match"),
        ({"scope": "always", "match": "prefix", "prefix": "echo"}, "match"),
        ({"scope": "session", "match": "prefix", "prefix": ""}, "prefix"),
        ({"scope": "session", "match": "prefix", "prefix": "echo 'open"}, "prefix"),
        ({"scope": "session", "prefix": "echo"}, "prefix"),
    ]
    for fields, field in cases:
        with pytest.raises(InvalidCommand) as caught:
            resolve(kit, approval_id, **fields)
        assert caught.value.field == field, fields
    # nothing was decided: the approval still waits, and a valid decision settles it
    resolve(kit, approval_id, scope="session", match="prefix", prefix="echo")
    assert isinstance(kit.wait_for_end(ticket.run_id), RunCompleted)


def test_a_call_that_could_never_run_is_refused_before_a_human_is_asked(kit: NodeKit) -> None:
    ticket, _ = kit.run("x\n" + _shell("rm", "-rf", "/"))
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "deny"
    assert "refused before asking" in decision.reason and "allowlist" in decision.reason
    assert "tool.approval_requested" not in kit.kinds(ticket.run_id)
    (completed,) = kit.events(ticket.run_id, "tool.completed")
    assert not completed.ok and completed.error_kind == "denied"


@pytest.mark.parametrize(
    "url", ["https://not-allowed.example/x", "https://example.org.evil.test/", "ftp://example.org/"]
)
def test_a_fetch_the_allowlist_refuses_is_refused_before_a_human_is_asked(
    make_node: MakeNode, url: str
) -> None:
    kit = make_node(tools=ToolsConfig(http_allowlist=("example.org",)))
    call = json.dumps({"url": url})
    ticket, _ = kit.run(f"x\n/tool http.fetch {call}")
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "deny" and "refused before asking" in decision.reason
    assert "tool.approval_requested" not in kit.kinds(ticket.run_id)
    allowed = kit.start_run('y\n/tool http.fetch {"url": "https://example.org/x"}')
    assert approval_of(kit, allowed.run_id).tool == "http.fetch"  # an allowed host is asked


def test_a_session_grant_lasts_until_the_session_resets(kit: NodeKit) -> None:
    first = kit.start_run(f"one\n{SHELL}")
    resolve(kit, approval_of(kit, first.run_id).approval_id, scope="session")
    kit.wait_for_end(first.run_id)
    sid = first.session_id
    assert [g.tool for g in kit.ask(GetSessionState(session_id=sid)).grants] == ["shell.run"]

    second, end = kit.run(f"two\n{SHELL}", session_id=sid)
    assert isinstance(end, RunCompleted)
    decision = decided(kit, second.run_id)
    assert (decision.outcome, decision.grant) == ("allow", "session")
    assert "tool.approval_requested" not in kit.kinds(second.run_id)
    assert kit.events(second.run_id, "tool.completed")[0].ok

    # another session is not covered
    other = kit.start_run(f"elsewhere\n{SHELL}")
    resolve(kit, approval_of(kit, other.run_id).approval_id, "deny")
    kit.wait_for_end(other.run_id)

    kit.ask(ResetSession(session_id=sid))
    assert kit.ask(GetSessionState(session_id=sid)).grants == ()
    third = kit.start_run(f"three\n{SHELL}", session_id=sid)
    request = approval_of(kit, third.run_id)
    assert decided(kit, third.run_id).grant is None
    resolve(kit, request.approval_id, "deny")
    kit.wait_for_end(third.run_id)


def test_a_denial_is_fed_back_and_the_run_completes(kit: NodeKit) -> None:
    ticket = kit.start_run(f"please\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    resolve(kit, request.approval_id, "deny", principal="bob", reason="not today")
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunCompleted)
    (resolved,) = kit.events(ticket.run_id, "tool.approval_resolved")
    assert (resolved.decision, resolved.decided_by, resolved.reason) == ("deny", "bob", "not today")
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert not done.ok and done.error_kind == "denied"
    assert "not today" in (done.error or "")
    assert "shell.run -> error (denied)" in end.answer
    with pytest.raises(ApprovalAlreadyResolved):
        resolve(kit, request.approval_id)


def test_an_always_grant_covers_other_sessions_of_the_same_principal(kit: NodeKit) -> None:
    first = kit.start_run(f"one\n{SHELL}", principal="carol")
    resolve(kit, approval_of(kit, first.run_id).approval_id, scope="always")
    kit.wait_for_end(first.run_id)
    assert kit.gate.has_always("carol", "shell.run")

    second, end = kit.run(f"two\n{SHELL}", principal="carol")
    assert second.session_id != first.session_id
    assert isinstance(end, RunCompleted)
    decision = decided(kit, second.run_id)
    assert (decision.outcome, decision.grant) == ("allow", "always")
    assert "tool.approval_requested" not in kit.kinds(second.run_id)

    stranger = kit.start_run(f"three\n{SHELL}", principal="dave")
    resolve(kit, approval_of(kit, stranger.run_id).approval_id, "deny")
    kit.wait_for_end(stranger.run_id)


def test_an_approval_times_out_as_a_denial(make_node: MakeNode) -> None:
    kit = make_node(config=ActorsConfig(budgets=RunBudgets(max_turns=4), approval_timeout_s=0.3))
    ticket = kit.start_run(f"wait\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    assert request.expires_at_ms > 0
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunCompleted)
    (resolved,) = kit.events(ticket.run_id, "tool.approval_resolved")
    assert (resolved.decision, resolved.reason, resolved.decided_by) == ("deny", "timeout", "node")
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert done.error_kind == "denied" and "timed out" in (done.error or "")
    with pytest.raises(ApprovalAlreadyResolved):
        resolve(kit, request.approval_id)


def test_time_awaiting_approval_does_not_count_against_the_wall_clock(
    make_node: MakeNode,
) -> None:
    # 2 s of budget: the run's own work took over 0.4 s on a loaded two-core machine
    kit = make_node(config=ActorsConfig(budgets=RunBudgets(wall_clock_s=2.0)))
    ticket = kit.start_run(f"patient\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    time.sleep(2.5)  # longer than the whole wall-clock budget, spent waiting for a human
    assert kit.kinds(ticket.run_id)[-1] == "run.awaiting_approval"
    resolve(kit, request.approval_id)
    assert isinstance(kit.wait_for_end(ticket.run_id), RunCompleted)


@pytest.mark.parametrize("attempt", range(5))
def test_racing_decisions_exactly_one_wins(kit: NodeKit, attempt: int) -> None:
    ticket = kit.start_run(f"race {attempt}\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    barrier = threading.Barrier(2)
    outcomes: list[object] = []
    lock = threading.Lock()

    def decide(decision: str) -> None:
        barrier.wait()
        try:
            result: object = resolve(kit, request.approval_id, decision)
        except Exception as exc:  # collected and checked below
            result = exc
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=decide, args=(d,)) for d in ("allow", "deny")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(o is True for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, ApprovalAlreadyResolved) for o in outcomes) == 1, outcomes
    assert len(kit.events(ticket.run_id, "tool.approval_resolved")) == 1
    assert isinstance(kit.wait_for_end(ticket.run_id), RunCompleted)


def test_a_decision_for_an_unknown_approval_is_refused(kit: NodeKit) -> None:
    for approval_id in (new_id(), "nope"):
        with pytest.raises(UnknownApproval):
            resolve(kit, approval_id)


def test_cancel_while_awaiting_approval_closes_the_approval(kit: NodeKit) -> None:
    ticket = kit.start_run(f"never mind\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    kit.wait_for_kind(ticket.run_id, "run.awaiting_approval")
    kit.ask(CancelRun(run_id=ticket.run_id, principal="bob"))
    # Acknowledged only once durable: a restart now fails the run instead of resuming it.
    (requested,) = kit.events(ticket.run_id, "run.cancel_requested")
    assert requested.requested_by == "bob"
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunCancelled) and end.requested_by == "bob"
    (resolved,) = kit.events(ticket.run_id, "tool.approval_resolved")
    assert (resolved.decision, resolved.decided_by, resolved.reason) == (
        "deny",
        "node",
        "cancelled",
    )
    # Each event names who caused it: the canceller, then the node closing the call for them.
    assert [(s.kind, s.principal) for s in kit.stored(ticket.run_id)[-5:]] == [
        ("run.awaiting_approval", "operator"),
        ("run.cancel_requested", "bob"),
        ("tool.approval_resolved", "node"),
        ("tool.completed", "node"),
        ("run.cancelled", "bob"),
    ]
    assert kit.node.services.registry.pending_approvals() == []
    with pytest.raises(ApprovalAlreadyResolved):
        resolve(kit, request.approval_id)


def test_posture_disabled_denies_and_hides_the_tool(make_node: MakeNode) -> None:
    kit = make_node(postures={"echo": "disabled"})
    offered = {d.name for d in kit.node.services.tool_definitions}
    assert "echo" not in offered and "time.now" in offered
    ticket, end = kit.run('x\n/tool echo {"text": "a"}')
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "deny" and decision.posture == "disabled"
    assert "baseline.posture_disabled" in decision.policy_ids
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert done.error_kind == "denied"
    assert isinstance(end, RunCompleted)


def test_posture_ask_each_time_requires_approval_for_a_harmless_tool(
    make_node: MakeNode,
) -> None:
    kit = make_node(postures={"echo": "ask_each_time"})
    ticket = kit.start_run('x\n/tool echo {"text": "a"}')
    request = approval_of(kit, ticket.run_id)
    assert decided(kit, ticket.run_id).outcome == "approval_required"
    resolve(kit, request.approval_id)
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunCompleted) and 'echo -> {"text":"a"}' in end.answer


OPS_POLICY = (
    '@id("ops_shell")\n'
    'permit (principal, action == Action::"tool.execute", resource == Tool::"shell.run");\n'
)


def test_an_operator_permit_runs_a_sensitive_tool_without_asking(
    make_node: MakeNode, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "ops.cedar").write_text(OPS_POLICY)
    kit = make_node(policy_dir=policies, postures={"shell.run": "always_allow"})
    ticket, end = kit.run(f"go\n{SHELL}")
    decision = decided(kit, ticket.run_id)
    assert decision.outcome == "allow" and decision.policy_ids == ("ops.ops_shell",)
    assert "tool.approval_requested" not in kit.kinds(ticket.run_id)
    assert isinstance(end, RunCompleted) and "governed" in end.answer


def test_an_operator_permit_does_not_lift_the_ask_each_time_posture(
    make_node: MakeNode, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "ops.cedar").write_text(OPS_POLICY)
    kit = make_node(policy_dir=policies)  # shell.run keeps its default posture: ask_each_time
    ticket = kit.start_run(f"go\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    resolve(kit, request.approval_id, "deny")
    kit.wait_for_end(ticket.run_id)


def test_always_allow_posture_alone_does_not_make_a_critical_tool_run(
    make_node: MakeNode,
) -> None:
    kit = make_node(postures={"shell.run": "always_allow"})
    ticket = kit.start_run(f"go\n{SHELL}")
    request = approval_of(kit, ticket.run_id)
    resolve(kit, request.approval_id, "deny")
    kit.wait_for_end(ticket.run_id)


def test_a_decision_right_after_the_request_is_accepted(kit: NodeKit) -> None:
    """A client that follows the tape (reel chat, the console) answers as soon as it sees the
    request; that decision must be taken, not refused. The window is narrow, so this tries up
    to ATTEMPTS approvals and stops at the first refusal."""
    refused: list[str] = []
    for attempt in range(ATTEMPTS):
        ticket = kit.start_run(f"quick {attempt}\n{SHELL}")
        # woken by the commit itself, as a client following the tape is
        request = kit.wait_for_kind(ticket.run_id, "tool.approval_requested")
        try:
            resolve(kit, request.approval_id, "deny")
        except ApprovalAlreadyResolved as exc:
            refused.append(str(exc))
            kit.wait_for_approval(ticket.run_id)
            resolve(kit, request.approval_id, "deny")
        kit.wait_for_end(ticket.run_id)
        if refused:
            break
    assert refused == [], f"refused after {attempt + 1} attempts: {refused[0]}"


ATTEMPTS = 150
