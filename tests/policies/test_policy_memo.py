"""A remembered ``tool.execute`` decision is the one Cedar gives again (policies/engine.py's
memo, policies/context_reads.py): what the policies read of the context decides the key, a
policy that reads a per-call field puts it in the key, one that reads the context whole turns
the memo off, and a memoizing engine answers every request of a random sequence exactly as an
engine that asks Cedar each time."""

from __future__ import annotations

import json
from pathlib import Path

import cedarpy
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies import PolicyEngine, ToolRequest, UsageToday
from policies.context_reads import context_reads
from policies.loader import load_policies
from tests.policies.conftest import write_policies


def reads_of(text: str) -> frozenset[str] | None:
    document = json.loads(cedarpy.policies_to_json_str(text))
    return context_reads(document["staticPolicies"].values())


def test_the_attributes_read_are_found_however_written() -> None:
    text = """
    permit (principal, action, resource) when {
      context.posture == "x" && context["run_id"] == "r" && context has channel &&
      context.usage_today.runs > 3 && [context.session_id].contains("s")
    };
    """
    expected = {"posture", "run_id", "channel", "usage_today", "session_id"}
    assert reads_of(text) == frozenset(expected)


@pytest.mark.parametrize(
    "condition",
    [
        'context == {"approved": true}',
        '[context].contains({"approved": true})',
        'context.approved && {"c": context}.c.approved',
        "context is Context",
    ],
)
def test_a_policy_that_uses_the_context_whole_turns_the_memo_off(condition: str) -> None:
    try:
        text = f"permit (principal, action, resource) when {{ {condition} }};"
        assert reads_of(text) is None
    except ValueError:  # not Cedar at all: nothing to memoize either
        pytest.skip(f"cedarpy does not parse {condition!r}")


def test_the_baseline_reads_no_per_call_field() -> None:
    reads = load_policies(None).context_reads
    assert reads is not None
    assert not reads & {"session_id", "run_id", "usage_today", "channel"}


BY_RUN = """\
@id("by_run")
forbid (principal, action == Action::"tool.execute", resource) when { context.run_id == "r2" };
"""

BY_CHANNEL = """\
@id("by_channel")
forbid (principal, action == Action::"tool.execute", resource)
when { context has channel && context.channel == Channel::"matrix" };
"""

WHOLE = """\
@id("whole")
forbid (principal, action == Action::"tool.execute", resource)
when { [context].contains(context) && !context.approved && context.run_id == "r3" };
"""


def echo(**fields: object) -> ToolRequest:
    base: dict[str, object] = {
        "principal": "alice",
        "tool": "echo",
        "capabilities": (),
        "risk": "low",
        "posture": "always_allow",
        "session_id": "s1",
        "run_id": "r1",
    }
    return ToolRequest(**(base | fields))  # type: ignore[arg-type]


def test_a_policy_that_reads_the_run_id_is_asked_for_each_run(operator_dir: Path) -> None:
    engine = PolicyEngine.load(write_policies(operator_dir, {"run.cedar": BY_RUN}))
    outcomes = [engine.decide(echo(run_id=r)).outcome for r in ("r1", "r2", "r1", "r2")]
    assert outcomes == ["allow", "deny", "allow", "deny"]


def test_a_policy_that_reads_the_channel_is_asked_for_each_channel(operator_dir: Path) -> None:
    engine = PolicyEngine.load(write_policies(operator_dir, {"channel.cedar": BY_CHANNEL}))
    asked = [engine.decide(echo(channel=c)).outcome for c in ("cli", "matrix", None, "matrix")]
    assert asked == ["allow", "deny", "allow", "deny"]


TOOLS = [
    ("echo", (), "low", "always_allow"),
    ("fs.read", ("fs.read",), "low", "always_allow"),
    ("shell.run", ("process.exec",), "critical", "always_allow"),
    ("http.fetch", ("net.egress",), "medium", "ask_each_time"),
    ("fs.write", ("fs.write",), "medium", "disabled"),
    ("mcp.probe.add", (), "low", "always_allow"),
]

requests = st.builds(
    lambda tool, principal, roles, approved, session, run, tokens, channel: ToolRequest(
        principal=principal,
        tool=tool[0],
        capabilities=tool[1],
        risk=tool[2],
        posture=tool[3],
        approved=approved,
        roles=roles,
        session_id=session,
        run_id=run,
        usage_today=UsageToday(tokens=tokens),
        channel=channel,
    ),
    st.sampled_from(TOOLS),
    st.sampled_from(["alice", "ops", "channel:matrix:@bob:hs"]),
    st.sampled_from([(), ("operator",), ("viewer",)]),
    st.booleans(),
    st.sampled_from(["s1", "s2"]),
    st.sampled_from(["r1", "r2", "r3"]),
    st.sampled_from([0, 999, 5_000]),
    st.sampled_from([None, "cli", "matrix"]),
)

CAP = """\
@id("cap")
forbid (principal, action == Action::"tool.execute", resource)
when { context.usage_today.tokens > 1000 };
"""

OPERATOR_SETS = {
    "baseline": {},
    "run": {"run.cedar": BY_RUN},
    "channel_and_usage": {"channel.cedar": BY_CHANNEL, "cap.cedar": CAP},
    "whole": {"whole.cedar": WHOLE},
}


@pytest.fixture(scope="module")
def engine_pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[PolicyEngine, PolicyEngine]]:
    """Per operator set: an engine that memoizes (kept across examples, so later examples
    meet what earlier ones left in its memo) and one that asks Cedar every time."""
    pairs = {}
    for name, files in OPERATOR_SETS.items():
        loaded = load_policies(write_policies(tmp_path_factory.mktemp(name) / "policies", files))
        pairs[name] = (
            PolicyEngine(loaded),
            PolicyEngine(msgspec.structs.replace(loaded, context_reads=None)),
        )
    return pairs


@pytest.mark.parametrize("name", sorted(OPERATOR_SETS))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(sequence=st.lists(requests, min_size=1, max_size=25))
def test_a_memoizing_engine_answers_as_cedar_does_each_time(
    name: str,
    sequence: list[ToolRequest],
    engine_pair: dict[str, tuple[PolicyEngine, PolicyEngine]],
) -> None:
    memoizing, asking = engine_pair[name]
    for request in sequence:
        assert memoizing.decide(request) == asking.decide(request), request
