"""The task fold and decider, without threads: the retry schedule, expiry (an expired task never
runs), final failure, reclaim of a lapsed claim, and two claimers on a real journal of which
exactly one wins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.stream import Recorded
from actors.tasks.decide import (
    Claim,
    Done,
    Expire,
    GiveUp,
    TaskNotActive,
    Wait,
    backoff_ms,
    cancelled,
    claimed,
    failed,
    heartbeat,
    next_action,
    settled,
    succeeded,
)
from actors.tasks.state import TaskState, apply, start
from actors.tasks.store import enqueue, load_task, write
from events import ConcurrencyConflict, Journal, NodeKey
from events.catalog import (
    Event,
    TaskClaimed,
    TaskEnqueued,
    TaskExpired,
    TaskFailed,
    TaskSucceeded,
)
from events.task_lifecycle import TaskStatus

T0 = 1_700_000_000_000
"""Enqueue time (ms); every other time is relative to it."""


def task(**fields: object) -> TaskState:
    values: dict[str, object] = {"task_id": "t1", "task_kind": "noop", "not_before_ms": T0}
    values.update(fields)
    return start(TaskEnqueued(**values), "node", T0)  # type: ignore[arg-type]


def fold(state: TaskState, *events: tuple[Event, int]) -> TaskState:
    for event, at in events:
        state = apply(state, Recorded(event, state.stream, at))
    return state


def claim_at(state: TaskState, now: int, worker: str = "n.0", lease_ms: int = 10_000) -> TaskState:
    event = claimed(state, now, worker, lease_ms)
    assert event is not None, next_action(state, now)
    return fold(state, (event, now))


def fail_at(state: TaskState, now: int, worker: str = "n.0") -> TaskState:
    event = failed(state, worker, state.attempt, "boom", now)
    assert event is not None
    return fold(state, (event, now))


def test_a_task_is_claimed_once_due_and_not_before() -> None:
    state = task(not_before_ms=T0 + 5_000)
    assert next_action(state, T0) == Wait(T0 + 5_000)
    assert claimed(state, T0 + 4_999, "n.0", 1_000) is None
    assert next_action(state, T0 + 5_000) == Claim(1)
    running = claim_at(state, T0 + 5_000)
    assert (running.status, running.attempt, running.worker) == (TaskStatus.RUNNING, 1, "n.0")
    assert running.lease_until_ms == T0 + 15_000 and running.next_seq == 2
    assert next_action(running, T0 + 6_000) == Wait(T0 + 15_000)


def test_retries_back_off_exponentially_without_jitter_then_fail_for_good() -> None:
    state = task(max_attempts=4, backoff_base_ms=1_000, backoff_max_ms=3_000)
    assert [backoff_ms(state, n) for n in (1, 2, 3, 4, 5)] == [1_000, 2_000, 3_000, 3_000, 3_000]
    now = T0
    schedule = []
    for attempt in (1, 2, 3):
        state = claim_at(state, now)
        assert state.attempt == attempt
        state = fail_at(state, now + 100)
        retry_at = state.retry_at_ms
        assert state.status is TaskStatus.RETRYING and retry_at is not None
        schedule.append(retry_at - (now + 100))
        assert next_action(state, retry_at - 1) == Wait(retry_at)
        now = retry_at
    assert schedule == [1_000, 2_000, 3_000]
    state = claim_at(state, now)
    last = failed(state, "n.0", 4, "boom again", now + 10)
    assert last is not None and last.retry_at_ms is None  # the last attempt: final
    state = fold(state, (last, now + 10))
    assert state.status is TaskStatus.FAILED and state.ended_at_ms == now + 10
    assert next_action(state, now + 10**9) == Done()
    assert claimed(state, now + 10**9, "n.1", 1_000) is None


def test_a_failure_retrying_cannot_help_is_final_at_once() -> None:
    state = claim_at(task(max_attempts=5), T0)
    event = failed(state, "n.0", 1, "bad payload", T0 + 1, retryable=False)
    assert event is not None and event.retry_at_ms is None
    assert fold(state, (event, T0 + 1)).status is TaskStatus.FAILED


def test_an_expired_task_never_runs() -> None:
    state = task(not_before_ms=T0 + 1_000, expires_at_ms=T0 + 500)
    # It waits until its expiry (which comes before its due time), then expires.
    assert next_action(state, T0) == Wait(T0 + 500)
    assert next_action(state, T0 + 500) == Expire()
    assert claimed(state, T0 + 1_000, "n.0", 1_000) is None
    expired = settled(state, T0 + 500)
    assert isinstance(expired, TaskExpired) and expired.attempts == 0
    state = fold(state, (expired, T0 + 500))
    assert state.status is TaskStatus.EXPIRED and next_action(state, T0 + 10**6) == Done()


def test_a_retry_due_after_the_expiry_expires_instead() -> None:
    state = task(expires_at_ms=T0 + 1_500, backoff_base_ms=1_000)
    state = fail_at(claim_at(state, T0), T0 + 800)  # the retry would start at T0 + 1800
    assert next_action(state, T0 + 900) == Wait(T0 + 1_500)
    assert next_action(state, T0 + 1_500) == Expire()
    assert claimed(state, T0 + 1_800, "n.0", 1_000) is None
    expired = settled(state, T0 + 1_500)
    assert isinstance(expired, TaskExpired) and expired.attempts == 1


def test_a_lapsed_claim_is_reclaimed_as_the_next_attempt() -> None:
    state = claim_at(task(max_attempts=3), T0, worker="dead.0", lease_ms=2_000)
    renewed = heartbeat(state, "dead.0", 1, T0 + 1_000, 2_000)
    assert renewed is not None
    state = fold(state, (renewed, T0 + 1_000))
    assert state.lease_until_ms == T0 + 3_000 and state.heartbeat_at_ms == T0 + 1_000
    assert next_action(state, T0 + 2_999) == Wait(T0 + 3_000)
    assert next_action(state, T0 + 3_000) == Claim(2, reclaim=True)
    state = claim_at(state, T0 + 3_000, worker="alive.1")
    assert (state.attempt, state.worker, state.reclaims) == (2, "alive.1", 1)
    # The old holder lost its claim: its heartbeat and its result are not decided.
    assert heartbeat(state, "dead.0", 1, T0 + 3_100, 2_000) is None
    assert succeeded(state, "dead.0", 1, {"late": True}, 5) is None
    done = succeeded(state, "alive.1", 2, {"ok": True}, 5)
    assert isinstance(done, TaskSucceeded)


def test_the_last_attempt_lapsing_fails_the_task_lapsed() -> None:
    state = claim_at(task(max_attempts=1), T0, lease_ms=1_000)
    assert next_action(state, T0 + 1_000) == GiveUp()
    event = settled(state, T0 + 1_000)
    assert isinstance(event, TaskFailed) and event.error_kind == "lapsed"
    assert event.retry_at_ms is None and "lease lapsed" in event.error
    assert fold(state, (event, T0 + 1_000)).status is TaskStatus.FAILED


def test_a_lapsed_claim_past_the_expiry_expires() -> None:
    state = claim_at(task(expires_at_ms=T0 + 1_500), T0, lease_ms=1_000)
    assert next_action(state, T0 + 1_200) == Claim(2, reclaim=True)
    assert next_action(state, T0 + 1_500) == Expire()


def test_cancel_of_an_ended_task_is_refused() -> None:
    state = claim_at(task(), T0)
    cancel = cancelled(state, "user:alice", "no longer needed")
    assert (cancel.attempt, cancel.cancelled_by) == (1, "user:alice")
    state = fold(state, (cancel, T0 + 1))
    assert state.status is TaskStatus.CANCELLED and state.cancel_reason == "no longer needed"
    with pytest.raises(TaskNotActive):
        cancelled(state, "user:bob", "")
    assert cancelled(task(), "user:alice", "").attempt == 0  # nothing was running


# --- on a real journal -------------------------------------------------------------------------


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "k")) as j:
        yield j


def test_two_claimers_of_one_task_cannot_both_win(journal: Journal) -> None:
    ticket, state = enqueue(journal, "noop", {"n": 1})
    assert state is not None
    now = state.not_before_ms
    first = claimed(state, now, "a.0", 10_000)
    second = claimed(state, now, "b.0", 10_000)
    assert first is not None and second is not None  # both folded the same state...
    journal.append(state.stream, [first], expected_seq=state.next_seq, principal="node")
    with pytest.raises(ConcurrencyConflict):  # ...the journal keeps one
        journal.append(state.stream, [second], expected_seq=state.next_seq, principal="node")
    # Through the write path the loser reads the stream again and finds nothing due.
    after = write(journal, state, lambda s: claimed(s, now, "b.0", 10_000), principal="node")
    assert (after.worker, after.attempt) == ("a.0", 1)
    kinds = [row.kind for row in journal.read_stream(state.stream)]
    assert kinds == ["task.enqueued", "task.claimed"]
    assert load_task(journal, ticket.task_id) == after


def test_a_second_success_is_refused_by_the_stream(journal: Journal) -> None:
    _, state = enqueue(journal, "noop")
    assert state is not None
    now = state.not_before_ms
    state = write(journal, state, lambda s: claimed(s, now, "a.0", 10_000), principal="node")
    stale = state
    state = write(journal, state, lambda s: succeeded(s, "a.0", 1, {"n": 1}, 3), principal="node")
    again = write(journal, stale, lambda s: succeeded(s, "a.0", 1, {"n": 2}, 3), principal="node")
    assert again == state and again.result == {"n": 1}
    assert [row.kind for row in journal.read_stream(state.stream)].count("task.succeeded") == 1
    assert isinstance(journal.read_stream(state.stream)[-1].decode(), TaskSucceeded)


def test_the_fold_of_a_claim_event_is_what_was_stored(journal: Journal) -> None:
    """The writer folds the redacted event with its commit time: a reader folds the same."""
    _, state = enqueue(journal, "noop", {"token": "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"})
    assert state is not None and "ghp_" not in str(state.payload)
    state = write(
        journal,
        state,
        lambda s: claimed(s, s.not_before_ms, "a.0", 5_000),
        principal="node",
    )
    assert isinstance(journal.read_stream(state.stream)[-1].decode(), TaskClaimed)
    assert load_task(journal, state.task_id) == state
