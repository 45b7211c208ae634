"""Loading: the baseline, operator files, stable ids, and the errors that stop a node."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies import (
    BASELINE_DIR,
    PolicyEngine,
    PolicyLoadError,
    PolicyParseError,
    PolicyValidationError,
    ToolRequest,
)
from policies.access import AccessRequest

FORBID_HTTP = """\
@id("no_http")
forbid (principal, action == Action::"tool.execute", resource == Tool::"http.fetch");
"""


def write_policies(directory: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")


BASELINE_IDS = {
    "baseline.read_only",
    "baseline.approval.resolve",
    "baseline.grant.revoke",
    "baseline.posture_disabled",
    "baseline.posture_ask_each_time",
    "baseline.tool.stranger",
    "baseline.tool.low_risk",
    "baseline.tool.approved",
    "baseline.role.admin",
    "baseline.role.operator",
    "baseline.role.agent.create",
    "baseline.role.agent.own",
    "baseline.role.agent.memory.read",
    "baseline.role.agent.memory.own",
    "baseline.learning.review",
    "baseline.channel.status",
    "baseline.channel.stop_own_run",
    "baseline.channel.reset_own_session",
    "baseline.role.operator.channels",
    "baseline.vault.use",
    "baseline.schedule.own",
    "baseline.vault.use.mcp_server",
    "baseline.usage.own",
}


def test_baseline_loads_with_stable_ids() -> None:
    engine = PolicyEngine.load(None)
    assert set(engine.policy_ids) == BASELINE_IDS
    assert len(engine.policy_ids) == len(BASELINE_IDS)
    source = engine.source_of("baseline.posture_disabled")
    assert (Path(source.path).name, source.effect, source.operator) == (
        "tool_execute.cedar",
        "forbid",
        False,
    )
    assert all(Path(s.path).parent == BASELINE_DIR for s in engine.sources)


def test_missing_operator_dir_means_no_operator_policies(tmp_path: Path) -> None:
    engine = PolicyEngine.load(tmp_path / "does-not-exist")
    assert set(engine.policy_ids) == BASELINE_IDS


def test_operator_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "policies"
    path.write_text("", encoding="utf-8")
    with pytest.raises(PolicyLoadError) as caught:
        PolicyEngine.load(path)
    assert caught.value.path == path
    assert "not a directory" in str(caught.value)


def test_operator_ids_are_prefixed_with_the_file_name(operator_dir: Path) -> None:
    write_policies(
        operator_dir,
        {
            "forbid_http.cedar": FORBID_HTTP,
            "reads.cedar": 'forbid (principal == Principal::"mallory", action, resource);\n'
            'permit (principal, action == Action::"approval.read", resource);\n',
            "notes.txt": "not a policy file",
        },
    )
    engine = PolicyEngine.load(operator_dir)
    operator_ids = [s.policy_id for s in engine.sources if s.operator]
    assert operator_ids == ["forbid_http.no_http", "reads.policy0", "reads.policy1"]
    assert engine.source_of("reads.policy0").path == str(operator_dir / "reads.cedar")
    denied = engine.authorize(
        AccessRequest(
            principal="mallory",
            roles=("viewer",),
            action="session.read",
            resource_id="s1",
            context={"session_id": "s1", "owner": "mallory"},
        )
    )
    assert (denied.outcome, denied.policy_ids) == ("deny", ("reads.policy0",))


def test_unknown_attribute_fails_validation_naming_the_file(operator_dir: Path) -> None:
    bad = operator_dir / "colour.cedar"
    bad.write_text(
        '@id("red_only")\n'
        'permit (principal, action == Action::"tool.execute", resource)\n'
        'when { resource.colour == "red" };\n',
        encoding="utf-8",
    )
    with pytest.raises(PolicyValidationError) as caught:
        PolicyEngine.load(operator_dir)
    assert caught.value.path == bad
    assert str(bad) in str(caught.value)
    # cedarpy's own words, attributed to the stable id.
    assert "[colour.red_only]" in caught.value.detail
    assert "attribute `colour` on entity type `Tool` not found" in caught.value.detail


def test_unknown_entity_type_fails_validation(operator_dir: Path) -> None:
    bad = operator_dir / "users.cedar"
    bad.write_text('permit (principal == User::"alice", action, resource);\n', encoding="utf-8")
    with pytest.raises(PolicyValidationError) as caught:
        PolicyEngine.load(operator_dir)
    assert caught.value.path == bad
    assert "unrecognized entity type `User`" in caught.value.detail


def test_optional_channel_must_be_guarded_with_has(operator_dir: Path) -> None:
    (operator_dir / "chan.cedar").write_text(
        'forbid (principal, action == Action::"tool.execute", resource)\n'
        'when { context.channel == Channel::"discord" };\n',
        encoding="utf-8",
    )
    with pytest.raises(PolicyValidationError, match=r"chan\.cedar") as caught:
        PolicyEngine.load(operator_dir)
    assert "optional attribute `channel`" in caught.value.detail


def test_syntax_error_is_a_parse_error_naming_file_and_line(operator_dir: Path) -> None:
    bad = operator_dir / "typo.cedar"
    bad.write_text(
        "// fine first\n"
        'permit (principal, action == Action::"session.read", resource);\n'
        "\n"
        "permit (principal, action, resource) when { context.approved = true };\n",
        encoding="utf-8",
    )
    with pytest.raises(PolicyParseError) as caught:
        PolicyEngine.load(operator_dir)
    assert caught.value.path == bad
    assert "'=' is not a valid operator in Cedar" in caught.value.detail
    assert "line 4" in caught.value.detail
    assert not isinstance(caught.value, PolicyValidationError)


def test_duplicate_ids_are_refused(operator_dir: Path) -> None:
    write_policies(
        operator_dir,
        {
            "a.cedar": '@id("x")\npermit (principal, action == Action::"run.read", resource);\n'
            '@id("x")\npermit (principal, action == Action::"run.read", resource);\n'
        },
    )
    with pytest.raises(PolicyValidationError, match=r"'a\.x' is used twice"):
        PolicyEngine.load(operator_dir)


def test_templates_are_refused(operator_dir: Path) -> None:
    (operator_dir / "tpl.cedar").write_text(
        'permit (principal == ?principal, action == Action::"run.read", resource);\n',
        encoding="utf-8",
    )
    with pytest.raises(PolicyValidationError, match="templates"):
        PolicyEngine.load(operator_dir)


def test_undecodable_file_is_a_load_error(operator_dir: Path) -> None:
    bad = operator_dir / "binary.cedar"
    bad.write_bytes(b"\xff\xfe permit")
    with pytest.raises(PolicyLoadError) as caught:
        PolicyEngine.load(operator_dir)
    assert caught.value.path == bad


def test_operator_policy_may_use_channel_and_tool_attributes(operator_dir: Path) -> None:
    (operator_dir / "chan.cedar").write_text(
        '@id("no_discord_exec")\n'
        'forbid (principal, action == Action::"tool.execute", resource)\n'
        'when { context has channel && context.channel == Channel::"discord"\n'
        '       && resource.capabilities.contains("process.exec") };\n',
        encoding="utf-8",
    )
    engine = PolicyEngine.load(operator_dir)

    def decide(channel: str | None) -> str:
        return engine.decide(
            ToolRequest(
                principal="alice",
                tool="shell.run",
                capabilities=("process.exec",),
                risk="critical",
                posture="always_allow",
                channel=channel,
                approved=True,
            )
        ).outcome

    assert (decide("discord"), decide("cli"), decide(None)) == ("deny", "allow", "allow")


def test_operator_gate_turns_a_free_tool_into_an_approval(operator_dir: Path) -> None:
    (operator_dir / "gate.cedar").write_text(
        '@id("echo")\n'
        'forbid (principal, action == Action::"tool.execute", resource == Tool::"echo")\n'
        "unless { context.approved };\n",
        encoding="utf-8",
    )
    decision = PolicyEngine.load(operator_dir).decide(
        ToolRequest(
            principal="alice", tool="echo", capabilities=(), risk="low", posture="always_allow"
        )
    )
    assert (decision.outcome, decision.policy_ids, decision.reason) == (
        "approval_required",
        ("baseline.tool.approved", "baseline.tool.low_risk"),
        "approval required: held back by gate.echo",
    )
