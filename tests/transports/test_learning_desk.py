"""The learning desk on a real journal with the node's memory writer: races between reflection
and a reviewer settle so that a fact is a memory item exactly when its candidate is applied,
and an apply retried after a crash finds its item instead of writing a second one."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from actors.learning.desk import LearningDesk, LearningSettings, memory_item_id
from actors.learning.rules import Proposal
from actors.learning.state import CandidateConflict, stream_of
from events import Journal, NodeKey
from events.catalog import MemoryItemDeleted, MemoryItemWritten
from transports.learning import LearnedMemory

ALICE = "user:alice"


class ReviewDuringApply(LearnedMemory):
    """The node's memory writer, with a reviewer acting right after the item is written (the
    moment between an apply's memory write and its event)."""

    def __init__(self, journal: Journal, review: str) -> None:
        super().__init__(journal)
        self.review = review
        self.armed = True

    def remember(
        self, text: str, *, owner: str, item_id: str, candidate_id: str
    ) -> Callable[[], None]:
        wait = super().remember(text, owner=owner, item_id=item_id, candidate_id=candidate_id)
        wait()
        if self.armed:
            self.armed = False
            reviewer = LearningDesk(self.journal, LearningSettings(), LearnedMemory(self.journal))
            getattr(reviewer, self.review)(candidate_id, by="user:ann", reason="no")
        return wait


@pytest.fixture
def journal(data_dir: Path) -> Iterator[Journal]:
    with Journal(data_dir / "journal.db", node_key=NodeKey.load_or_create(data_dir / "k")) as j:
        yield j


def fact(*runs: str) -> Proposal:
    return Proposal(
        kind="fact",
        text="staging is db-2",
        principal=ALICE,
        dedupe_key="staging is db-2",
        confidence_bps=9000,
        runs=runs,
        positions=tuple((1,) for _ in runs),
    )


def memory_kinds(journal: Journal, item_id: str) -> list[str]:
    return [type(s.decode()).__name__ for s in journal.read_stream(f"memory/{item_id}")]


def test_an_apply_that_loses_to_a_reject_leaves_no_memory_item(journal: Journal) -> None:
    settings = LearningSettings(apply_fact_bps=9_200)  # due once a second run shows it
    desk = LearningDesk(journal, settings, LearnedMemory(journal))
    state, applied = desk.record(fact("r1"), run_id="r1")
    assert (state.status, applied) == ("pending", False)
    racing = LearningDesk(journal, settings, ReviewDuringApply(journal, "reject"))
    state, applied = racing.record(fact("r1", "r2"), run_id="r2")
    # The reviewer's reject won; the evidence was still recorded on the retry; the item the
    # losing apply wrote was deleted again.
    assert (state.status, applied) == ("rejected", False) and state.runs == ("r1", "r2")
    item = memory_item_id(state.candidate_id, 0)
    assert memory_kinds(journal, item) == [MemoryItemWritten.__name__, MemoryItemDeleted.__name__]
    kinds = [s.kind for s in journal.read_stream(stream_of(state.candidate_id))]
    assert kinds == [
        "learning.candidate_proposed",
        "learning.candidate_rejected",
        "learning.evidence_added",
    ]


def test_two_accepts_at_once_write_one_item_and_one_is_refused(journal: Journal) -> None:
    settings = LearningSettings(apply_fact_bps=10_001)
    desk = LearningDesk(journal, settings, LearnedMemory(journal))
    state, _ = desk.record(fact("r1"), run_id="r1")
    racing = LearningDesk(journal, settings, ReviewDuringApply(journal, "accept"))
    with pytest.raises(CandidateConflict):
        racing.accept(state.candidate_id, by="user:bob")
    after = desk.state(state.candidate_id)
    assert after is not None and after.status == "applied"
    assert after.memory_item_id == memory_item_id(state.candidate_id, 0)
    assert memory_kinds(journal, after.memory_item_id) == [MemoryItemWritten.__name__]


def test_an_apply_retried_after_a_crash_finds_its_item(journal: Journal) -> None:
    desk = LearningDesk(journal, LearningSettings(apply_fact_bps=10_001), LearnedMemory(journal))
    state, _ = desk.record(fact("r1"), run_id="r1")
    # A crash between the memory write and the apply's event: the item exists, the candidate
    # is still pending. The accept that follows writes no second item.
    LearnedMemory(journal).remember(
        state.text,
        owner=ALICE,
        item_id=memory_item_id(state.candidate_id, 0),
        candidate_id=state.candidate_id,
    )()
    after = desk.accept(state.candidate_id, by="user:ann")
    assert after.status == "applied" and after.memory_item_id is not None
    assert memory_kinds(journal, after.memory_item_id) == [MemoryItemWritten.__name__]
    # Rolled back and accepted again: a new item (the old one stays deleted).
    desk.rollback(state.candidate_id, by="user:ann")
    again = desk.accept(state.candidate_id, by="user:ann")
    assert again.memory_item_id == memory_item_id(state.candidate_id, 1)
    assert memory_kinds(journal, after.memory_item_id)[-1] == MemoryItemDeleted.__name__


def test_an_applied_fact_and_its_memory_item_share_one_commit(journal: Journal) -> None:
    """Reflection applying a fact writes the item and the candidate's events in one commit
    (two before: the item's, then the candidate's), the item first."""
    commits: list[int] = []
    unlisten = journal.listen(commits.append)
    try:
        desk = LearningDesk(journal, LearningSettings(), LearnedMemory(journal))
        state, applied = desk.record(fact("r1"), run_id="r1")
        accepted = desk.record(
            Proposal(
                kind="fact",
                text="prod is db-1",
                principal=ALICE,
                dedupe_key="prod is db-1",
                confidence_bps=7000,  # under the threshold: pending, for a reviewer
                runs=("r2",),
                positions=((1,),),
            ),
            run_id="r2",
        )[0]
        before = len(commits)
        reviewed = desk.accept(accepted.candidate_id, by="user:ann")
    finally:
        unlisten()
    assert applied and state.status == "applied" and state.memory_item_id is not None
    assert len(commits) == 3  # the fact, the pending candidate, the accept
    assert len(commits) - before == 1 and reviewed.memory_item_id is not None
    for candidate, item in ((state, state.memory_item_id), (reviewed, reviewed.memory_item_id)):
        (written,) = journal.read_stream(f"memory/{item}")
        last = journal.read_stream(stream_of(candidate.candidate_id))[-1]
        assert last.kind == "learning.candidate_applied"
        assert written.position < last.position  # the item first, in the same commit
        assert written.recorded_at_ms == last.recorded_at_ms
