"""Compaction on a real node: automatic after runs of a long conversation (small budget, the
deterministic provider: extractive summaries), the cooldown, on request, never while a run is
live, restore to a checkpoint and what the next run's context then holds, model-written
summaries (and the extractive fallback when the model fails), and the same state after a
restart."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors import Conflict, InvalidCommand
from actors.messages import (
    CancelRun,
    CompactionOutcome,
    CompactSession,
    GetSessionState,
    RestoreSession,
)
from actors.provider import ProviderError, ProviderEvent, ProviderRequest
from actors.sessions.compaction import (
    EXTRACTIVE_NOTE,
    MODEL_INSTRUCTIONS,
    SUMMARY_CUT,
    SUMMARY_HEADER,
)
from actors.sessions.state import SessionCheckpoint, SessionState
from events import StoredEvent
from events.catalog import RunContextAssembled, SessionCompacted, SessionRestored
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import SMALL, NodeKit
from transports.models import DeterministicProvider

BUDGET = 600
"""Small enough that a few turns pass the threshold (Limits: history 350, threshold 262, keep
131, summary 87 with the shipped system prompt)."""
TIGHT = msgspec.structs.replace(SMALL, context_budget_tokens=BUDGET, compact_cooldown_s=0.0)
MANUAL = msgspec.structs.replace(TIGHT, compact_at=0.0)


def say(i: int) -> str:
    return f"Message {i} of a long conversation. " + " ".join(f"word{i}x{k}" for k in range(14))


def compactions(kit: NodeKit, session_id: str) -> list[tuple[StoredEvent, SessionCompacted]]:
    out = []
    for row in kit.journal.read_stream(f"session/{session_id}"):
        event = row.decode()
        if isinstance(event, SessionCompacted):
            out.append((row, event))
    return out


def state_of(kit: NodeKit, session_id: str) -> SessionState:
    state = kit.ask(GetSessionState(session_id=session_id))
    assert isinstance(state, SessionState)
    return state


def conversation(kit: NodeKit, turns: int) -> tuple[str, list[str]]:
    """A session with ``turns`` completed runs, one after the other."""
    ticket, _ = kit.run(say(0))
    runs = [ticket.run_id]
    for i in range(1, turns):
        t, end = kit.run(say(i), session_id=ticket.session_id)
        assert end.__struct_config__.tag == "run.completed"
        runs.append(t.run_id)
    return ticket.session_id, runs


def assembled(kit: NodeKit, run_id: str) -> RunContextAssembled:
    (event,) = kit.events(run_id, "run.context_assembled")
    assert isinstance(event, RunContextAssembled)
    return event


def test_a_long_conversation_is_compacted_after_its_runs_and_stays_in_budget(
    make_node: MakeNode,
) -> None:
    kit = make_node(config=TIGHT)
    session_id, runs = conversation(kit, 14)
    # Sent the moment the last answer is on the journal: under load it often reaches the session
    # before that run's end does, and the compaction due must still come first (no turn dropped).
    follow, _ = kit.run("and now?", session_id=session_id)
    made = compactions(kit, session_id)
    assert len(made) >= 3
    ends = {r: kit.stored(r)[-1].position for r in runs}
    previous: tuple[str, ...] = ()
    for row, event in made:
        assert (row.principal, event.trigger, event.method) == ("node", "auto", "extractive")
        # Cumulative, oldest first, and only runs that had ended before it was recorded.
        assert event.covers[: len(previous)] == previous and len(event.covers) > len(previous)
        assert event.covers == tuple(runs[: len(event.covers)])
        assert all(ends[r] < row.position for r in event.covers)
        assert event.tokens_after < event.tokens_before
        assert event.summary.startswith(f"{SUMMARY_HEADER} {EXTRACTIVE_NOTE}:")
        previous = event.covers
    # A run sees the summary in force when it was accepted, and the turns it leaves out.
    accepted_at = kit.stored(follow.run_id)[0].position
    in_force = [e for row, e in made if row.position < accepted_at][-1]
    context = assembled(kit, follow.run_id)
    assert context.compaction_id == in_force.compaction_id
    assert context.prior_runs == tuple(r for r in runs if r not in in_force.covers)
    assert context.dropped_runs == 0
    for run_id in [*runs, follow.run_id]:
        assert assembled(kit, run_id).estimated_input_tokens <= BUDGET
    # The session's fold holds the same checkpoints as the journal (the journal may be ahead).
    state = state_of(kit, session_id)
    ids = [e.compaction_id for _, e in compactions(kit, session_id)]
    assert [c.checkpoint_id for c in state.checkpoints] == ids[: len(state.checkpoints)]


SLOW = msgspec.structs.replace(TIGHT, compact_cooldown_s=3600.0)
"""One automatic compaction per hour: tests that go on after the first one are deterministic
(a run's end may reach its session after the test's next command)."""


def first_compaction(kit: NodeKit, session_id: str) -> SessionCompacted:
    made = kit.wait_until(lambda: compactions(kit, session_id) or None, what="a compaction")
    return made[0][1]


def test_the_cooldown_holds_automatic_compaction_back(make_node: MakeNode) -> None:
    kit = make_node(config=SLOW)
    session_id, _ = conversation(kit, 14)
    first_compaction(kit, session_id)
    kit.run("one more", session_id=session_id)
    assert len(compactions(kit, session_id)) == 1
    # A request does not wait for it.
    outcome = kit.ask(CompactSession(session_id=session_id, principal="user:ann"))
    assert outcome.status == "compacted"
    assert len(compactions(kit, session_id)) == 2


def test_restore_to_the_first_checkpoint_gives_the_next_run_that_context(
    make_node: MakeNode,
) -> None:
    kit = make_node(config=SLOW)
    session_id, runs = conversation(kit, 10)
    first = first_compaction(kit, session_id)
    for i in range(10, 13):
        runs.append(kit.run(say(i), session_id=session_id)[0].run_id)
    second = kit.ask(CompactSession(session_id=session_id, principal="ann"))
    assert second.covers[: len(first.covers)] == first.covers

    checkpoint = kit.ask(
        RestoreSession(session_id=session_id, checkpoint_id=first.compaction_id, principal="ann")
    )
    assert (
        isinstance(checkpoint, SessionCheckpoint)
        and checkpoint.checkpoint_id == first.compaction_id
    )
    restored_row = kit.journal.read_stream(f"session/{session_id}")[-1]
    assert restored_row.principal == "ann"
    assert restored_row.decode() == SessionRestored(
        session_id=session_id, checkpoint_id=first.compaction_id
    )
    state = state_of(kit, session_id)
    assert state.compaction is not None and state.compaction.compaction_id == first.compaction_id
    assert state.history == checkpoint.history and state.runs == tuple(runs)
    assert [c.checkpoint_id for c in state.checkpoints] == [
        first.compaction_id,
        second.compaction_id,
    ]

    follow, _ = kit.run("what did we say?", session_id=session_id)
    context = assembled(kit, follow.run_id)
    assert context.compaction_id == first.compaction_id
    assert context.prior_runs == tuple(r for r in checkpoint.history if r not in first.covers)
    assert context.prior_runs and set(context.prior_runs).isdisjoint(runs[-3:])

    with pytest.raises(InvalidCommand) as caught:
        kit.ask(RestoreSession(session_id=session_id, checkpoint_id="01J0000000000000000000NONE"))
    assert caught.value.field == "checkpoint"


def test_on_request_and_never_while_a_run_is_live(make_node: MakeNode) -> None:
    kit = make_node(config=MANUAL)
    ticket, _ = kit.run(say(1))
    session_id = ticket.session_id
    live = kit.start_run("/sleep 20000", session_id=session_id)
    kit.wait_for_kind(live.run_id, "run.started")
    queued = kit.start_run("after the sleep", session_id=session_id)
    for command in (
        CompactSession(session_id=session_id),
        RestoreSession(session_id=session_id, checkpoint_id="01J0000000000000000000NONE"),
    ):
        with pytest.raises(Conflict, match="run in progress or queued"):
            kit.ask(command)
    assert compactions(kit, session_id) == []
    kit.ask(CancelRun(run_id=live.run_id))
    kit.wait_for_end(queued.run_id)

    outcome = kit.ask(CompactSession(session_id=session_id, principal="user:ann"))
    assert isinstance(outcome, CompactionOutcome)
    # The cancelled run has no answer: never shown, never condensed. The newest completed run
    # fits the history alone, and a request condenses at least the oldest.
    assert (outcome.status, outcome.method, outcome.covers) == (
        "compacted",
        "extractive",
        (ticket.run_id,),
    )
    ((row, event),) = compactions(kit, session_id)
    assert (row.principal, event.trigger, event.summary) == ("user:ann", "request", outcome.summary)
    assert outcome.tokens_after == event.tokens_after
    second = kit.ask(CompactSession(session_id=session_id))
    assert second.covers == (ticket.run_id, queued.run_id)
    # It replaces the first summary; the budget is so small that the older line is cut.
    assert second.summary.split("\n")[1:] == [SUMMARY_CUT, second.summary.split("\n")[-1]]
    assert second.summary.endswith("user: after the sleep | answer: after the sleep")
    with pytest.raises(Conflict, match="no completed run left"):
        kit.ask(CompactSession(session_id=session_id))


def test_a_restart_folds_the_same_checkpoints(tmp_path: Path) -> None:
    kit = NodeKit(tmp_path / "node", config=SLOW)
    try:
        session_id, _ = conversation(kit, 10)
        first = first_compaction(kit, session_id)
        kit.ask(CompactSession(session_id=session_id))
        kit.ask(RestoreSession(session_id=session_id, checkpoint_id=first.compaction_id))
        before = state_of(kit, session_id)
    finally:
        kit.close()
    again = NodeKit(tmp_path / "node", config=SLOW)
    try:
        after = state_of(again, session_id)
    finally:
        again.close()
    assert after == before and len(after.checkpoints) >= 2


class _Flaky(DeterministicProvider):
    """A real deterministic provider for the runs that fails every summary it is asked for."""

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        if request.messages[0].content.startswith(MODEL_INSTRUCTIONS[:40]):
            raise ProviderError("the model is overloaded", retryable=True, status=503)
        async for item in super().stream(request):
            yield item


@pytest.mark.parametrize("flaky", [False, True])
def test_with_a_model_the_summary_is_written_by_it(make_node: MakeNode, flaky: bool) -> None:
    provider: Any = _Flaky(name="flaky-model") if flaky else DeterministicProvider(name="a-model")
    kit = make_node(config=MANUAL, provider=provider)
    session_id, runs = conversation(kit, 3)
    outcome = kit.ask(CompactSession(session_id=session_id, principal="user:ann"))
    assert (outcome.status, outcome.method, outcome.summary) == ("writing", "model", "")
    made = kit.wait_until(lambda: compactions(kit, session_id) or None, what="session.compacted")
    ((row, event),) = made
    assert event.compaction_id == outcome.compaction_id and row.principal == "user:ann"
    assert event.covers == outcome.covers == tuple(runs[: outcome.condensed])
    if flaky:  # the model failed: the session records an extractive summary instead
        assert event.method == "extractive"
        assert event.summary.startswith(SUMMARY_HEADER)
    else:  # the deterministic provider "writes" by echoing the fenced conversation
        assert event.method == "model"
        assert event.summary.startswith('<reference source="conversation to condense">')
        assert f"- user: {say(0)}" in event.summary
    follow, _ = kit.run("next", session_id=session_id)
    assert assembled(kit, follow.run_id).compaction_id == event.compaction_id
