"""Read-only calls of one turn run at once (actors/runs/decide.py, ``ParallelCalls``): decided
one by one in proposal order, executed concurrently up to ``[runs] max_parallel_tool_calls``,
recorded in proposal order whatever order they finish in. Calls that may write, or that wait
for a human, run alone. A cancel stops the whole batch.

Each test runs a real node (journal, Cedar, catalog, the deterministic provider proposing the
calls) against a loopback server whose gates prove what was in flight at once without a clock
(tests/actors/runs/readserver.py).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import ActorsConfig, RunBudgets
from actors.messages import CancelRun, ResolveApproval
from events.catalog import RunCancelled, RunCompleted, ToolProposed
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import NodeKit
from tests.actors.runs.readserver import ReadServer
from tools import ToolsConfig


def budgets(parallel: int = 4) -> ActorsConfig:
    return ActorsConfig(
        budgets=RunBudgets(
            max_turns=4, max_tool_calls=8, wall_clock_s=120.0, max_parallel_tool_calls=parallel
        ),
        cancel_grace_s=10.0,  # a loaded machine's stopped calls are waited for, not cut off
    )


TOOLS = ToolsConfig(http_allowlist=("127.0.0.1",), http_allow_private=("127.0.0.1/32",))
ALLOWED = {"http.fetch": "always_allow", "fs.write": "always_allow"}
POLICY = """
@id("test.fetch_unasked")
permit (principal, action == Action::"tool.execute", resource == Tool::"http.fetch")
when { context.posture == "always_allow" };

@id("test.write_unasked")
permit (principal, action == Action::"tool.execute", resource == Tool::"fs.write")
when { context.posture == "always_allow" };
"""
"""The baseline asks a human for every high-risk or egress call whatever its posture: these
let an ``always_allow`` posture run http.fetch and fs.write unasked, as an operator would."""


@pytest.fixture
def make(make_node: MakeNode, tmp_path: Path) -> MakeNode:
    """``make_node`` with the loopback allowlist and :data:`POLICY`."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "reads.cedar").write_text(POLICY)

    def build(parallel: int, **options: Any) -> NodeKit:
        return make_node(config=budgets(parallel), tools=TOOLS, policy_dir=policies, **options)

    return build


@pytest.fixture
def server() -> Iterator[ReadServer]:
    server = ReadServer()
    server.start()
    yield server
    server.release()
    server.stop()


def fetch(url: str) -> str:
    return "/tool http.fetch " + json.dumps({"url": url})


def calls_of(kit: NodeKit, run_id: str) -> list[tuple[str, str]]:
    """(kind, call id) of every tool event on the tape, in tape order."""
    call_of: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for kind, event in kit.tape(run_id):
        if isinstance(event, ToolProposed):
            call_of[event.invocation_id] = event.call_id
        invocation = getattr(event, "invocation_id", None)
        if kind.startswith("tool.") and invocation in call_of:
            out.append((kind, call_of[invocation]))
    return out


def order(kit: NodeKit, run_id: str, kind: str) -> list[str]:
    return [call for k, call in calls_of(kit, run_id) if k == kind]


def at(kit: NodeKit, run_id: str, kind: str, call: str | None = None) -> int:
    """Where the first ``kind`` event (of ``call``, for a tool event) is on the whole tape."""
    call_of: dict[str, str] = {}
    for index, (k, event) in enumerate(kit.tape(run_id)):
        if isinstance(event, ToolProposed):
            call_of[event.invocation_id] = event.call_id
        if k == kind and (call is None or call_of.get(getattr(event, "invocation_id", "")) == call):
            return index
    raise AssertionError(f"no {kind} {call or ''} on the tape")


def test_four_slow_reads_run_at_once_and_are_recorded_in_proposal_order(
    make: MakeNode, server: ReadServer
) -> None:
    kit = make(4, postures=ALLOWED)
    lines = [fetch(server.url("gate", n, group="a", of=4)) for n in (1, 2, 3, 4)]
    ticket, end = kit.run("read all\n" + "\n".join(lines))

    assert isinstance(end, RunCompleted), end
    # All four were in flight at once (a gate of four cannot open for calls made one by one),
    # and they finished in reverse order.
    assert server.gave_up == 0 and server.max_in_flight == 4
    assert server.answered == [4, 3, 2, 1]
    calls = ["call_1", "call_2", "call_3", "call_4"]
    assert order(kit, ticket.run_id, "tool.proposed") == calls
    assert order(kit, ticket.run_id, "tool.decided") == calls
    assert order(kit, ticket.run_id, "tool.completed") == calls  # proposal order, not finish
    for before, after in itertools.pairwise(calls):  # decided one by one
        assert at(kit, ticket.run_id, "tool.decided", before) < at(
            kit, ticket.run_id, "tool.proposed", after
        )
    results = kit.events(ticket.run_id, "tool.completed")
    assert [r.ok for r in results] == [True] * 4
    assert [f"read {n}" in r.output for n, r in zip((1, 2, 3, 4), results, strict=True)] == [
        True
    ] * 4
    # The model reads the results in the order it proposed them.
    assert end.answer.index("read 1") < end.answer.index("read 4")


def test_no_more_calls_run_at_once_than_the_limit(make: MakeNode, server: ReadServer) -> None:
    kit = make(2, postures=ALLOWED)
    lines = [fetch(server.url("gate", n, group="ab"[(n - 1) // 2], of=2)) for n in (1, 2, 3, 4)]
    ticket, end = kit.run("two by two\n" + "\n".join(lines))

    assert isinstance(end, RunCompleted), end
    assert server.gave_up == 0  # each pair met at its gate: two at once...
    assert server.max_in_flight == 2  # ...and never three
    assert order(kit, ticket.run_id, "tool.completed") == ["call_1", "call_2", "call_3", "call_4"]


def test_one_at_a_time_when_the_limit_is_one(make: MakeNode, server: ReadServer) -> None:
    kit = make(1, postures=ALLOWED)
    lines = [fetch(server.url("plain", n)) for n in (1, 2, 3)]
    ticket, end = kit.run("one by one\n" + "\n".join(lines))

    assert isinstance(end, RunCompleted), end
    assert server.max_in_flight == 1
    tape = calls_of(kit, ticket.run_id)
    for before, after in (("call_1", "call_2"), ("call_2", "call_3")):
        assert tape.index(("tool.completed", before)) < tape.index(("tool.proposed", after))


def test_a_write_in_the_turn_runs_alone_between_the_reads_around_it(
    make: MakeNode, server: ReadServer
) -> None:
    kit = make(4, postures=ALLOWED)
    write = "/tool fs.write " + json.dumps({"path": "note.txt", "content": "written"})
    read_back = "/tool fs.read " + json.dumps({"path": "note.txt"})
    lines = [
        fetch(server.url("gate", 1, group="before", of=2)),
        fetch(server.url("gate", 2, group="before", of=2)),
        write,
        read_back,
        fetch(server.url("gate", 5, group="after", of=2)),
    ]
    ticket, end = kit.run("mixed\n" + "\n".join(lines))

    assert isinstance(end, RunCompleted), end
    # The reads on each side of the write ran together (both gates of two opened)...
    assert server.gave_up == 0
    # ...the write started only once both reads before it were recorded, and nothing after
    # it started before it completed.
    run = ticket.run_id
    assert at(kit, run, "tool.completed", "call_2") < at(kit, run, "tool.proposed", "call_3")
    assert at(kit, run, "tool.completed", "call_3") < at(kit, run, "tool.proposed", "call_4")
    assert order(kit, run, "tool.completed") == [f"call_{n}" for n in range(1, 6)]
    results = kit.events(run, "tool.completed")
    assert results[2].ok and "written" in results[3].output  # the read after saw the write


def test_a_read_that_needs_approval_waits_alone_for_its_turn(
    make: MakeNode, server: ReadServer
) -> None:
    # http.fetch asks a human by default (its shipped posture); fs.read does not.
    kit = make(4)
    (kit.workspace / "a.txt").write_text("alpha")
    read = "/tool fs.read " + json.dumps({"path": "a.txt"})
    ticket = kit.start_run("ask\n" + "\n".join([read, fetch(server.url("plain", 2)), read]))
    run = ticket.run_id
    request = kit.wait_for_approval(run)
    waiting = kit.wait_for_kind(run, "run.awaiting_approval")
    assert waiting.approval_id == request.approval_id
    # The run marks itself waiting only once the read before completed, and the read after
    # has not been proposed while the human decides.
    assert at(kit, run, "tool.completed", "call_1") < at(kit, run, "run.awaiting_approval")
    assert "call_3" not in order(kit, run, "tool.proposed")
    kit.ask(ResolveApproval(approval_id=request.approval_id, decision="allow"))
    end = kit.wait_for_end(run)

    assert isinstance(end, RunCompleted), end
    assert at(kit, run, "tool.completed", "call_2") < at(kit, run, "tool.proposed", "call_3")
    assert order(kit, run, "tool.completed") == ["call_1", "call_2", "call_3"]
    assert server.seen == [2]


def test_a_cancel_during_a_batch_stops_every_call_of_it(make: MakeNode, server: ReadServer) -> None:
    kit = make(4, postures=ALLOWED)
    lines = [fetch(server.url("hold", n)) for n in (1, 2, 3, 4)]
    ticket = kit.start_run("hold\n" + "\n".join(lines))
    run = ticket.run_id
    kit.wait_until(lambda: True if server.in_flight == 4 else None, what="four held reads")
    kit.ask(CancelRun(run_id=run, principal="alice"))
    end = kit.wait_for_end(run)

    assert isinstance(end, RunCancelled), end
    done: list[Any] = kit.events(run, "tool.completed")
    assert [d.ok for d in done] == [False] * 4
    assert {d.error_kind for d in done} == {"cancelled"}
    assert order(kit, run, "tool.completed") == ["call_1", "call_2", "call_3", "call_4"]
    assert kit.kinds(run)[-1] == "run.cancelled"  # the end stays last on the tape
    assert server.answered == []  # none was answered: each was stopped, not waited for
