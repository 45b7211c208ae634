"""The agent loop with the deterministic provider: answers, tool calls, failures, budgets."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest

from actors import ActorsConfig, RunBudgets
from actors.messages import ProviderItems, RunTicket, ToolAppended
from actors.provider import (
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    TurnEnd,
    Usage,
)
from actors.runs.actor import RunActor
from events.catalog import RunCompleted, RunFailed, ToolCompleted, ToolDecided, kind_of
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import NodeKit
from tools import ToolsConfig
from transports.models import DeterministicProvider


def words(text: str) -> int:
    return len(text.split())


def test_plain_answer_echoes_the_text_with_the_providers_token_counts(kit: NodeKit) -> None:
    ticket, end = kit.run("hello there, actor")
    kinds = kit.kinds(ticket.run_id)
    assert kinds[:3] == ["run.accepted", "run.started", "run.context_assembled"]
    assert kinds[-2:] == ["run.turn_completed", "run.completed"]
    assert set(kinds[3:-2]) == {"run.output"}
    outputs = kit.events(ticket.run_id, "run.output")
    assert "".join(o.text for o in outputs) == "hello there, actor"
    assert isinstance(end, RunCompleted)
    assert end.answer == "hello there, actor"
    assert end.reason == "final_answer"
    assert (end.turns, end.tool_calls) == (1, 0)
    # The deterministic provider counts prompt words (system prompt + message) and answer words.
    system = kit.node.services.config.system_prompt
    assert end.prompt_tokens == words(system) + 3
    assert end.completion_tokens == 3
    (turn,) = kit.events(ticket.run_id, "run.turn_completed")
    assert (turn.prompt_tokens, turn.completion_tokens, turn.finish_reason) == (
        end.prompt_tokens,
        3,
        "stop",
    )


def test_one_tool_call_is_proposed_decided_executed_and_fed_back(kit: NodeKit) -> None:
    ticket, end = kit.run('look\n/tool echo {"text": "ping"}')
    kinds = kit.kinds(ticket.run_id)
    assert (
        kinds.index("tool.proposed") < kinds.index("tool.decided") < kinds.index("tool.completed")
    )
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert done.ok and json.loads(done.output) == {"text": "ping"}
    assert isinstance(end, RunCompleted)
    assert end.answer == 'look\necho -> {"text":"ping"}'
    assert (end.turns, end.tool_calls) == (2, 1)


def test_several_tool_calls_in_one_message_run_in_order(kit: NodeKit) -> None:
    text = 'go\n/tool echo {"text": "a"}\n/tool echo {"text": "b"}\n/tool time.now {}'
    ticket, end = kit.run(text)
    proposed = kit.events(ticket.run_id, "tool.proposed")
    assert [(p.call_id, p.tool) for p in proposed] == [
        ("call_1", "echo"),
        ("call_2", "echo"),
        ("call_3", "time.now"),
    ]
    completed = kit.events(ticket.run_id, "tool.completed")
    assert [c.ok for c in completed] == [True, True, True]
    # one invocation at a time: each completes before the next is proposed
    stored = kit.stored(ticket.run_id)
    tool_kinds = [(s.stream, s.kind) for s in stored if s.stream.startswith("tool/")]
    streams = [stream for stream, _ in tool_kinds]
    assert streams == sorted(streams, key=streams.index)  # contiguous per invocation
    assert isinstance(end, RunCompleted)
    assert end.tool_calls == 3
    lines = end.answer.splitlines()
    assert lines[:3] == ["go", 'echo -> {"text":"a"}', 'echo -> {"text":"b"}']
    assert lines[3].startswith("time.now -> ")


def test_a_failing_tool_is_fed_back_and_the_run_completes(make_node: MakeNode) -> None:
    kit = make_node(tools=ToolsConfig(sleep_cap_s=1.0))
    ticket, end = kit.run('try\n/tool sleep {"seconds": 5}\n/tool fs.read {"path": "missing.txt"}')
    sleep_done, read_done = kit.events(ticket.run_id, "tool.completed")
    assert not sleep_done.ok and sleep_done.error_kind == "limit"
    assert "exceeds the cap" in (sleep_done.error or "")
    assert not read_done.ok and read_done.error_kind == "invalid"
    assert isinstance(end, RunCompleted)
    assert "sleep -> error (limit)" in end.answer
    assert "fs.read -> error (invalid)" in end.answer


def test_an_unknown_tool_is_denied_and_reported_to_the_model(kit: NodeKit) -> None:
    ticket, end = kit.run("x\n/tool no.such.tool {}")
    (decided,) = kit.events(ticket.run_id, "tool.decided")
    assert isinstance(decided, ToolDecided)
    assert decided.outcome == "deny" and "unknown tool" in decided.reason
    (done,) = kit.events(ticket.run_id, "tool.completed")
    assert isinstance(done, ToolCompleted)
    assert not done.ok and done.error_kind == "unknown_tool"
    assert "echo" in (done.error or "")  # the available tools are named
    assert isinstance(end, RunCompleted)
    assert "no.such.tool -> error (unknown_tool): unknown tool" in end.answer


def test_arguments_failing_the_schema_are_invalid_and_name_the_field(kit: NodeKit) -> None:
    ticket, end = kit.run('x\n/tool echo {"text": 5}\n/tool echo {"txt": "y"}')
    completed = kit.events(ticket.run_id, "tool.completed")
    assert [c.error_kind for c in completed] == ["invalid", "invalid"]
    assert "$.text" in (completed[0].error or "")
    assert "txt" in (completed[1].error or "")
    assert kit.events(ticket.run_id, "tool.decided") == []  # nothing invalid reaches policy
    assert isinstance(end, RunCompleted)


def test_arguments_that_are_not_json_make_no_call_and_fail_the_run(kit: NodeKit) -> None:
    ticket, end = kit.run('x\n/tool echo {"text": "fine"}\n/tool echo {"text": "cut')
    assert kit.events(ticket.run_id, "tool.proposed") == []  # not even the valid one
    (turn,) = kit.events(ticket.run_id, "run.turn_completed")
    assert (turn.tool_calls, turn.calls, turn.finish_reason) == (0, (), "tool_calls")
    assert isinstance(end, RunFailed) and end.reason == "provider_error"
    assert "arguments for echo (call_2) are not valid JSON" in end.message
    assert (end.turns, end.tool_calls) == (1, 0)


def test_max_turns_stops_a_tool_loop(make_node: MakeNode) -> None:
    kit = make_node(config=ActorsConfig(budgets=RunBudgets(max_turns=3, max_tool_calls=50)))
    ticket, end = kit.run('/tool-loop echo {"text": "again"}')
    assert isinstance(end, RunFailed)
    assert end.reason == "max_turns"
    assert (end.turns, end.tool_calls) == (3, 3)
    assert kit.kinds(ticket.run_id)[-1] == "run.failed"


def test_max_tool_calls_stops_a_tool_loop(make_node: MakeNode) -> None:
    kit = make_node(config=ActorsConfig(budgets=RunBudgets(max_turns=50, max_tool_calls=2)))
    ticket, end = kit.run('/tool-loop echo {"text": "again"}')
    assert isinstance(end, RunFailed)
    assert end.reason == "max_tool_calls"
    assert end.tool_calls == 2  # the third call is refused before it is proposed
    assert len(kit.events(ticket.run_id, "tool.proposed")) == 2


def test_wall_clock_budget_fails_a_slow_run(make_node: MakeNode) -> None:
    kit = make_node(config=ActorsConfig(budgets=RunBudgets(wall_clock_s=0.3)))
    ticket, end = kit.run("/sleep 5000\nslow")
    assert isinstance(end, RunFailed)
    assert end.reason == "wall_clock"
    assert kit.kinds(ticket.run_id)[-1] == "run.failed"


def test_provider_error_fails_the_run_and_the_session_stays_usable(kit: NodeKit) -> None:
    ticket, end = kit.run("/fail boom")
    assert isinstance(end, RunFailed)
    assert (end.reason, end.message) == ("provider_error", "boom")
    again, end2 = kit.run("still here?", session_id=ticket.session_id)
    assert isinstance(end2, RunCompleted) and end2.answer == "still here?"
    assert again.session_id == ticket.session_id and not again.queued


def test_a_malformed_directive_is_a_provider_error_naming_the_line(kit: NodeKit) -> None:
    _, end = kit.run("fine\n/sleep soon")
    assert isinstance(end, RunFailed) and end.reason == "provider_error"
    assert "line 2" in end.message


class ExplodingProvider:
    """A provider whose stream raises something that is not a ProviderError."""

    name = "exploding"

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        yield TextDelta(text="partial ")
        raise ZeroDivisionError("the model divided by zero")

    async def aclose(self) -> None:
        return None


def test_a_provider_raising_an_unexpected_exception_fails_the_run(make_node: MakeNode) -> None:
    kit = make_node(provider=ExplodingProvider())
    ticket, end = kit.run("anything")
    assert isinstance(end, RunFailed)
    assert end.reason == "provider_error"
    assert "ZeroDivisionError" in end.message and "divided by zero" in end.message
    assert kit.kinds(ticket.run_id)[-1] == "run.failed"
    assert "run.turn_completed" not in kit.kinds(ticket.run_id)


def test_history_of_completed_runs_reaches_the_model(kit: NodeKit) -> None:
    first, end1 = kit.run("one two three")
    _, end2 = kit.run("one two three", session_id=first.session_id)
    assert isinstance(end1, RunCompleted) and isinstance(end2, RunCompleted)
    # the second prompt carries the first exchange: 3 user words + 3 answer words
    assert end2.prompt_tokens == end1.prompt_tokens + 6


def test_the_default_provider_is_named_on_run_started(make_node: MakeNode) -> None:
    kit = make_node(provider=DeterministicProvider(name="det-test"))
    ticket, _ = kit.run("hi")
    (started,) = kit.events(ticket.run_id, "run.started")
    assert started.provider == "det-test"
    assert (started.max_turns, started.max_tool_calls) == (4, 8)


def run_counting_commits(
    kit: NodeKit, text: str
) -> tuple[RunTicket, RunCompleted, Callable[[int], int]]:
    """Run ``text`` to completion while noting the journal's head after each commit; the
    ticket, the end, and the commit (its head) a position was written in."""
    heads: list[int] = []
    unsubscribe = kit.journal.listen(heads.append)
    try:
        ticket, end = kit.run(text)
    finally:
        unsubscribe()
    assert isinstance(end, RunCompleted)
    return ticket, end, lambda position: min(head for head in heads if head >= position)


def test_a_step_whose_next_event_is_decided_from_the_last_is_one_commit(kit: NodeKit) -> None:
    """``run.started`` with ``run.context_assembled``, ``tool.proposed`` with
    ``tool.decided``, and a turn's last ``run.output`` with ``run.turn_completed`` and
    ``run.completed``, each land in one commit (one fsync, not one per event); the tape is the
    same events in the same order."""
    ticket, end, commit_of = run_counting_commits(kit, 'hello\n/tool echo {"text": "hi"}')
    stored = kit.stored(ticket.run_id)
    at = {row.kind: row.position for row in stored if row.kind != "run.turn_completed"}
    last_turn = max(row.position for row in stored if row.kind == "run.turn_completed")
    assert commit_of(at["run.started"]) == commit_of(at["run.context_assembled"])
    assert commit_of(at["tool.proposed"]) == commit_of(at["tool.decided"])
    assert commit_of(at["tool.decided"]) < commit_of(at["tool.completed"])
    assert commit_of(at["run.output"]) == commit_of(last_turn) == commit_of(at["run.completed"])
    kinds = [row.kind for row in stored]
    assert kinds[-3:] == ["run.output", "run.turn_completed", "run.completed"]
    assert end.answer.endswith(stored[-3].decode().text)  # type: ignore[attr-defined]


def test_a_call_refused_before_the_gate_is_one_commit_with_its_proposal(kit: NodeKit) -> None:
    """An unknown tool's proposal, decision and refusal are one commit, in that order on the
    tool's stream, and the run goes on with the refusal."""
    ticket, _, commit_of = run_counting_commits(kit, "/tool no.such.tool {}")
    tool_rows = [row for row in kit.stored(ticket.run_id) if row.stream.startswith("tool/")]
    assert [row.kind for row in tool_rows] == ["tool.proposed", "tool.decided", "tool.completed"]
    assert [row.stream_seq for row in tool_rows] == [0, 1, 2]
    assert len({commit_of(row.position) for row in tool_rows}) == 1
    assert tool_rows[2].decode().error_kind == "unknown_tool"  # type: ignore[attr-defined]


class WordsProvider:
    """Streams ``words`` text deltas; with ``hold``, waits after the first ``hold`` of them
    until the journal has a ``run.output`` (the earlier deltas reached the run and were
    recorded), giving up after ten seconds with a provider error."""

    name = "words"

    def __init__(self, words: int, hold: int | None = None) -> None:
        self.words = words
        self.hold = hold
        self.journal: Any = None

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        for number in range(self.words):
            if number == self.hold:
                deadline = time.monotonic() + 10.0
                while not any(e.kind == "run.output" for e in self.journal.read()):
                    if time.monotonic() > deadline:
                        raise ProviderError("the deltas before the wait never reached the run")
                    await asyncio.sleep(0.01)
            yield TextDelta(text=f"w{number} ")
        yield Usage(prompt_tokens=1, completion_tokens=self.words)
        yield TurnEnd(finish_reason="stop")

    async def aclose(self) -> None:
        return None


def test_a_stream_that_never_waits_reaches_the_run_as_one_message(
    make_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each message from the I/O loop is a thread hand-off: the items a stream yields before
    the loop turns travel together, with the stream's end (not 40 messages and a 41st)."""
    received: list[ProviderItems] = []
    on_receive = RunActor.on_receive

    def spy(self: RunActor, message: Any) -> Any:
        if isinstance(message, ProviderItems):
            received.append(message)
        return on_receive(self, message)

    monkeypatch.setattr(RunActor, "on_receive", spy)
    kit = make_node(provider=WordsProvider(40))
    _, end = kit.run("anything")
    assert isinstance(end, RunCompleted)
    assert end.answer == "".join(f"w{n} " for n in range(40))
    assert [(len(m.items), m.done) for m in received] == [(42, True)]


def test_a_streams_items_reach_the_run_while_the_stream_waits(make_node: MakeNode) -> None:
    """Items are not held for the stream's end: what arrived before a wait is recorded during
    it (20 words make a chunk; the provider waits for it on the journal)."""
    provider = WordsProvider(40, hold=20)
    kit = make_node(provider=provider)
    provider.journal = kit.journal
    ticket, end = kit.run("anything")
    assert isinstance(end, RunCompleted), end
    assert end.answer == "".join(f"w{n} " for n in range(40))
    assert len(kit.events(ticket.run_id, "run.output")) >= 2


def test_a_tool_tells_its_run_of_a_proposal_with_its_decision(
    make_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each report is a thread hand-off, and the run has nothing to do with a proposal alone:
    ``tool.proposed`` reaches it with ``tool.decided`` (an allowed call, then its result), or
    with the whole refusal (an unknown tool)."""
    reports: list[list[str]] = []
    on_receive = RunActor.on_receive

    def spy(self: RunActor, message: Any) -> Any:
        if isinstance(message, ToolAppended):
            reports.append([kind_of(rec.event) for rec in message.records])
        return on_receive(self, message)

    monkeypatch.setattr(RunActor, "on_receive", spy)
    kit = make_node()
    _, end = kit.run('go\n/tool echo {"text": "a"}\n/tool nope {}')
    assert isinstance(end, RunCompleted) and end.tool_calls == 2
    assert reports == [
        ["tool.proposed", "tool.decided"],
        ["tool.completed"],
        ["tool.proposed", "tool.decided", "tool.completed"],
    ]
