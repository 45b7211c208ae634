"""Sessions: resolve, keys, input checks, reset, branch, passivation and wake-up."""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest

from actors import (
    ActorsConfig,
    InvalidCommand,
    RunBudgets,
    SessionKeyTaken,
    UnknownSession,
)
from actors.messages import (
    BranchSession,
    GetSessionState,
    ResetSession,
    ResolveSession,
    SessionIdle,
    SessionInfo,
    StartRun,
)
from actors.sessions.actor import SessionActor
from actors.sessions.state import SessionState
from actors.system import directory
from events import JournalUnavailable, new_id
from events.catalog import RunCompleted
from tests.actors.conftest import MakeNode
from tests.actors.nodekit import DEADLINE_S, NodeKit


def test_resolve_session_by_key_creates_once_then_finds(kit: NodeKit) -> None:
    created = kit.ask(ResolveSession(session_key="alpha", label="A", create=True))
    assert isinstance(created, SessionInfo) and created.created
    assert (created.session_key, created.label) == ("alpha", "A")
    found = kit.ask(ResolveSession(session_key="alpha"))
    assert found.session_id == created.session_id and not found.created
    by_id = kit.ask(ResolveSession(session_id=created.session_id))
    assert by_id.session_key == "alpha"
    ticket = kit.start_run("hi", session_key="alpha")
    assert ticket.session_id == created.session_id and not ticket.session_created


def test_creating_a_second_session_with_a_taken_key_is_refused(kit: NodeKit) -> None:
    kit.ask(ResolveSession(session_key="taken", create=True))
    with pytest.raises(SessionKeyTaken):
        kit.ask(
            BranchSession(
                session_id=kit.ask(ResolveSession(session_key="taken")).session_id,
                session_key="taken",
            )
        )


def test_unknown_sessions_are_reported(kit: NodeKit) -> None:
    with pytest.raises(UnknownSession):
        kit.ask(ResolveSession(session_id=new_id()))
    with pytest.raises(UnknownSession):
        kit.ask(ResolveSession(session_key="nobody"))
    with pytest.raises(UnknownSession):
        kit.ask(StartRun(text="hi", session_id=new_id()))
    with pytest.raises(UnknownSession):
        kit.ask(StartRun(text="hi", session_key="nobody"))
    with pytest.raises(UnknownSession):
        kit.ask(GetSessionState(session_id=new_id()))
    with pytest.raises(UnknownSession):
        kit.ask(ResetSession(session_id="nonsense"))
    with pytest.raises(InvalidCommand) as neither:
        kit.ask(StartRun(text="hi"))
    assert neither.value.field == "session"


def test_start_run_with_a_new_key_creates_the_session(kit: NodeKit) -> None:
    ticket = kit.start_run("hi", session_key="fresh", create=True)
    assert ticket.session_created
    state = kit.ask(GetSessionState(session_id=ticket.session_id))
    assert state.session_key == "fresh" and state.runs == (ticket.run_id,)


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_an_empty_message_is_invalid_text(kit: NodeKit, text: str) -> None:
    with pytest.raises(InvalidCommand) as caught:
        kit.ask(StartRun(text=text, create=True))
    assert caught.value.field == "text"
    assert "empty" in str(caught.value)


def test_an_oversize_message_is_invalid_text(make_node: MakeNode) -> None:
    kit = make_node(config=ActorsConfig(max_message_bytes=100))
    kit.run("x" * 100)  # at the limit: fine
    with pytest.raises(InvalidCommand) as caught:
        kit.ask(StartRun(text="é" * 51, create=True))  # 102 bytes
    assert caught.value.field == "text"
    assert "102 bytes" in str(caught.value) and "100" in str(caught.value)


def test_reset_hides_earlier_turns_from_the_next_run(kit: NodeKit) -> None:
    first, before = kit.run("same words here")
    _, with_history = kit.run("same words here", session_id=first.session_id)
    info = kit.ask(ResetSession(session_id=first.session_id))
    assert info.reset_applied
    state = kit.ask(GetSessionState(session_id=first.session_id))
    assert state.history == () and state.resets == 1 and len(state.runs) == 2
    after_ticket, after = kit.run("same words here", session_id=first.session_id)
    assert isinstance(before, RunCompleted) and isinstance(after, RunCompleted)
    assert isinstance(with_history, RunCompleted)
    assert with_history.prompt_tokens > before.prompt_tokens
    assert after.prompt_tokens == before.prompt_tokens  # nothing of the past reached the model
    state = kit.ask(GetSessionState(session_id=first.session_id))
    assert state.history == (after_ticket.run_id,)


def test_resolve_session_with_reset(kit: NodeKit) -> None:
    ticket, _ = kit.run("hello")
    info = kit.ask(ResolveSession(session_id=ticket.session_id, reset=True))
    assert info.reset_applied
    assert kit.ask(GetSessionState(session_id=ticket.session_id)).history == ()


def test_branch_at_a_run_copies_history_up_to_it(kit: NodeKit) -> None:
    one, end1 = kit.run("one")
    two, _ = kit.run("two", session_id=one.session_id)
    kit.run("three", session_id=one.session_id)
    branch = kit.ask(BranchSession(session_id=one.session_id, run_id=two.run_id, label="b"))
    assert isinstance(branch, SessionInfo) and branch.created
    assert branch.parent_session_id == one.session_id
    assert branch.session_id != one.session_id
    state = kit.ask(GetSessionState(session_id=branch.session_id))
    assert state.history == (one.run_id, two.run_id)
    assert state.parent_session_id == one.session_id
    assert state.branched_from_run_id == two.run_id
    assert state.runs == ()
    # the branch's first run sees exactly the two inherited exchanges (1 word each side)
    _, in_branch = kit.run("one", session_id=branch.session_id)
    assert isinstance(in_branch, RunCompleted) and isinstance(end1, RunCompleted)
    assert in_branch.prompt_tokens == end1.prompt_tokens + 4
    parent = kit.ask(GetSessionState(session_id=one.session_id))
    assert len(parent.runs) == 3  # the parent is untouched


def test_branch_without_a_run_takes_the_whole_history(kit: NodeKit) -> None:
    one, _ = kit.run("one")
    two, _ = kit.run("two", session_id=one.session_id)
    branch = kit.ask(BranchSession(session_id=one.session_id, session_key="forked"))
    assert branch.session_key == "forked"
    state = kit.ask(GetSessionState(session_id=branch.session_id))
    assert state.history == (one.run_id, two.run_id)


def test_branch_at_an_unknown_run_is_invalid(kit: NodeKit) -> None:
    one, _ = kit.run("one")
    other, _ = kit.run("elsewhere")
    for run_id in (new_id(), other.run_id):
        with pytest.raises(InvalidCommand) as caught:
            kit.ask(BranchSession(session_id=one.session_id, run_id=run_id))
        assert caught.value.field == "run_id"


def live_session_actors() -> int:
    return len(pykka.ActorRegistry.get_by_class(SessionActor))


def wait_for(probe: object, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not probe():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_an_idle_session_is_passivated_and_wakes_with_the_same_state(
    make_node: MakeNode,
) -> None:
    kit = make_node(
        config=ActorsConfig(
            budgets=RunBudgets(max_turns=4), idle_passivate_s=0.2, passivate_check_s=0.05
        )
    )
    first, _ = kit.run("remember me", session_key="sleepy", label="L", create=True)
    kit.ask(ResetSession(session_id=first.session_id))
    second, _ = kit.run("and me", session_id=first.session_id)
    before = kit.ask(GetSessionState(session_id=first.session_id))
    assert isinstance(before, SessionState)
    wait_for(lambda: live_session_actors() == 0, "the session to passivate")
    after = kit.ask(GetSessionState(session_id=first.session_id))
    assert after == before
    assert live_session_actors() == 1  # woken by the question
    wait_for(lambda: live_session_actors() == 0, "the session to passivate again")
    third, end = kit.run("still works", session_key="sleepy")
    assert third.session_id == first.session_id
    assert isinstance(end, RunCompleted) and end.answer == "still works"
    state = kit.ask(GetSessionState(session_id=first.session_id))
    assert state.runs == (first.run_id, second.run_id, third.run_id)
    assert state.history == (second.run_id, third.run_id)


def test_a_session_woken_without_a_kept_state_folds_the_same_one(
    make_node: MakeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory keeps an idle session's id (and key) only, and folded states for the most
    recent few: a session beyond them folds its stream when it wakes, to the state it had,
    label, key, branch and history included."""
    monkeypatch.setattr(directory, "STATE_CACHE", 0)
    kit = make_node(
        config=ActorsConfig(
            budgets=RunBudgets(max_turns=4), idle_passivate_s=0.1, passivate_check_s=0.05
        )
    )
    first, _ = kit.run("remember me", session_key="folded", label="L", create=True)
    kit.ask(ResetSession(session_id=first.session_id))
    kit.run("and me", session_id=first.session_id)
    branch = kit.ask(BranchSession(session_id=first.session_id, session_key="twig", label="T"))
    ids = (first.session_id, branch.session_id)
    before = [kit.ask(GetSessionState(session_id=i)) for i in ids]
    wait_for(lambda: live_session_actors() == 0, "the sessions to passivate")
    sessions = kit.node.services.directory
    assert sessions is not None and not sessions.proxy().states.get()  # nothing kept: both fold
    assert [kit.ask(GetSessionState(session_id=i)) for i in ids] == before
    assert before[1].parent_session_id == first.session_id and before[1].history
    found = kit.ask(ResolveSession(session_key="twig"))
    assert (found.session_id, found.label) == (branch.session_id, "T")


def test_a_session_with_a_live_run_is_not_passivated(make_node: MakeNode) -> None:
    kit = make_node(
        config=ActorsConfig(
            budgets=RunBudgets(max_turns=4), idle_passivate_s=0.1, passivate_check_s=0.05
        )
    )
    ticket = kit.start_run("/sleep 1000\nslow")
    kit.wait_for_kind(ticket.run_id, "run.started")
    time.sleep(0.5)  # several passivation checks pass while the run is live
    assert live_session_actors() == 1
    queued = kit.start_run("next", session_id=ticket.session_id)
    assert queued.queued  # the live session still knows its run is active
    assert isinstance(kit.wait_for_end(queued.run_id), RunCompleted)


@pytest.mark.parametrize("idle_s", [0.0, 2.0])
def test_a_session_reports_itself_idle_only_when_that_stops_it_at_once(
    make_node: MakeNode, monkeypatch: pytest.MonkeyPatch, idle_s: float
) -> None:
    """With ``idle_passivate_s`` 0 a session tells the directory when nothing is live, and is
    stopped at once; with a delay the directory's tick finds it idle, and the message (a thread
    hand-off after every run) is not sent: it would change nothing."""
    told: list[SessionIdle] = []
    on_receive = directory.SessionDirectory.on_receive

    def spy(self: directory.SessionDirectory, message: Any) -> Any:
        if isinstance(message, SessionIdle):
            told.append(message)
        return on_receive(self, message)

    monkeypatch.setattr(directory.SessionDirectory, "on_receive", spy)
    config = ActorsConfig(
        budgets=RunBudgets(max_turns=4), idle_passivate_s=idle_s, passivate_check_s=60.0
    )
    kit = make_node(config=config)
    first, _ = kit.run("one", create=True)
    _, end = kit.run("two", session_id=first.session_id)
    assert isinstance(end, RunCompleted)
    if idle_s:
        # Behind the run's RunFinished in the session's inbox: answered once that was handled.
        assert kit.ask(GetSessionState(session_id=first.session_id)) is not None
        assert told == [] and live_session_actors() == 1
    else:
        wait_for(lambda: live_session_actors() == 0, "the session to passivate")
        assert {m.session_id for m in told} == {first.session_id}


def test_idle_sessions_hold_no_thread_by_default(kit: NodeKit) -> None:
    """With the shipped settings a session with nothing live gives its thread back at once,
    keeps its state (folded, in the directory) and answers its next message."""
    assert kit.node.services.config.idle_passivate_s <= 5  # seconds, not minutes
    baseline = threading.active_count()
    created = [
        kit.node.send(ResolveSession(session_key=f"idle-{i}", create=True)) for i in range(300)
    ]
    infos = [future.result(timeout=DEADLINE_S) for future in created]
    ticket, end = kit.run("one run", session_id=infos[0].session_id)
    assert isinstance(end, RunCompleted)
    wait_for(lambda: live_session_actors() == 0, "every idle session to passivate")
    assert threading.active_count() <= baseline + 2
    state = kit.ask(GetSessionState(session_id=infos[0].session_id))
    assert isinstance(state, SessionState) and state.runs == (ticket.run_id,)
    again, end = kit.run("and again", session_key="idle-0")
    assert again.session_id == infos[0].session_id and isinstance(end, RunCompleted)
    wait_for(lambda: live_session_actors() == 0, "the woken session to passivate again")


def test_a_run_asked_for_again_by_its_id_starts_once(kit: NodeKit) -> None:
    """A caller that chose the run id (a channel, after a crash) asks again: the session
    answers the same run and starts nothing; an id that is not a ULID is refused."""
    run_id = new_id()
    first, end = kit.run("once only", session_key="again", create=True, run_id=run_id)
    again = kit.start_run("once only", session_key="again", run_id=run_id)
    assert (first.run_id, again.run_id, again.session_id) == (run_id, run_id, first.session_id)
    assert isinstance(end, RunCompleted)
    state = kit.ask(GetSessionState(session_id=first.session_id))
    assert isinstance(state, SessionState) and state.runs == (run_id,)
    with pytest.raises(InvalidCommand) as refused:
        kit.start_run("hi", session_key="again", run_id="not-a-ulid")
    assert refused.value.field == "run_id"


def test_a_session_whose_creation_cannot_be_recorded_answers_its_callers(
    kit: NodeKit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal refuses ``session.created`` (the database away, the shard moved to
    another node): whoever asked for the session, and the run it was made for, hear why
    instead of waiting for ever; the key stays free and the next creation works."""
    appended = SessionActor._append
    refused = [True]

    def refusing(self: SessionActor, *events: Any, **kwargs: Any) -> Any:
        if refused and self.state is None:
            raise JournalUnavailable("the journal is not available")
        return appended(self, *events, **kwargs)

    monkeypatch.setattr(SessionActor, "_append", refusing)
    with pytest.raises(JournalUnavailable):
        kit.ask(ResolveSession(session_key="lost", create=True), timeout=10)
    with pytest.raises(JournalUnavailable):
        kit.ask(StartRun(text="hi", session_key="lost-too", create=True), timeout=10)
    refused.clear()
    made = kit.ask(ResolveSession(session_key="lost", create=True))
    assert made.created and made.session_key == "lost"
    ticket = kit.start_run("hi", session_key="lost-too", create=True)
    assert ticket.session_created
