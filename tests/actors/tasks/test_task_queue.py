"""The task queue on a real node: the worker pool runs tasks to success, retries with backoff,
expires what could not start in time, cancels a running handler, fails an unknown kind with a
clear reason, keeps a long attempt's claim alive with heartbeats, and reclaims a claim whose
holder died. Everything is read back from the journal."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actors import InvalidCommand
from actors.tasks.decide import TaskNotActive, UnknownTask
from actors.tasks.handlers import PermanentFailure, TaskContext
from actors.tasks.queue import TasksConfig
from actors.tasks.store import enqueue
from events import Journal, NodeKey, new_id
from events.catalog import TaskClaimed, TaskFailed
from events.task_lifecycle import TaskStatus, task_stream
from tests.actors.taskkit import QUICK, TaskKit


@pytest.fixture
def kits(tmp_path: Path) -> Iterator[list[TaskKit]]:
    made: list[TaskKit] = []
    yield made
    for kit in reversed(made):
        kit.close()


def make(kits: list[TaskKit], root: Path, **options: Any) -> TaskKit:
    kit = TaskKit(root, **options)
    kits.append(kit)
    return kit


def test_a_noop_task_runs_to_success(kits: list[TaskKit], tmp_path: Path) -> None:
    kit = make(kits, tmp_path / "n")
    ticket = kit.queue.enqueue("noop", {"hello": "world"}, principal="user:alice")
    state = kit.wait_for_end(ticket.task_id)
    assert state.status is TaskStatus.SUCCEEDED
    assert (state.attempt, state.result, state.principal) == (1, {"ok": True}, "user:alice")
    rows = kit.rows(ticket.task_id)
    assert [r.kind for r in rows] == ["task.enqueued", "task.claimed", "task.succeeded"]
    assert [r.principal for r in rows] == ["user:alice", "node", "node"]
    claim = rows[1].decode()
    assert isinstance(claim, TaskClaimed) and claim.worker.startswith(kit.queue.node_id + ".")


def test_a_failing_handler_is_retried_with_exponential_backoff(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    calls: list[int] = []

    def flaky(payload: Any, context: TaskContext) -> Any:
        calls.append(context.attempt)
        if context.attempt < 3:
            raise RuntimeError(f"not yet ({context.attempt})")
        return {"attempt": context.attempt}

    kit = make(kits, tmp_path / "n", handlers={"flaky": flaky})
    ticket = kit.queue.enqueue("flaky", max_attempts=4)
    state = kit.wait_for_end(ticket.task_id)
    assert state.status is TaskStatus.SUCCEEDED and state.result == {"attempt": 3}
    assert calls == [1, 2, 3]
    rows = kit.rows(ticket.task_id)
    assert [r.kind for r in rows] == [
        "task.enqueued",
        "task.claimed",
        "task.failed",
        "task.claimed",
        "task.failed",
        "task.claimed",
        "task.succeeded",
    ]
    failures = [(r, r.decode()) for r in rows if r.kind == "task.failed"]
    claims = [r for r in rows if r.kind == "task.claimed"]
    base_ms = round(QUICK.backoff_base_s * 1000)
    for n, (row, event) in enumerate(failures, start=1):
        assert isinstance(event, TaskFailed) and event.retry_at_ms is not None
        assert event.error == f"RuntimeError: not yet ({n})" and event.error_kind == "error"
        backoff = base_ms * 2 ** (n - 1)
        # decided after the attempt's claim was recorded, and before its own failure was: the
        # bounds hold however long the decision took to commit (no timing window).
        assert claims[n - 1].recorded_at_ms + backoff <= event.retry_at_ms
        assert event.retry_at_ms <= row.recorded_at_ms + backoff
        assert claims[n].recorded_at_ms >= event.retry_at_ms  # never before it was due
    assert state.error == "RuntimeError: not yet (2)"  # the last failure stays as history


def test_a_failure_retrying_cannot_help_is_final(kits: list[TaskKit], tmp_path: Path) -> None:
    def strict(payload: Any, context: TaskContext) -> Any:
        raise PermanentFailure("payload has no run_id")

    kit = make(kits, tmp_path / "n", handlers={"strict": strict})
    state = kit.wait_for_end(kit.queue.enqueue("strict", {}).task_id)
    assert (state.status, state.attempt) == (TaskStatus.FAILED, 1)
    assert state.error == "PermanentFailure: payload has no run_id"


def test_an_unknown_kind_fails_at_once_with_a_clear_reason(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    kit = make(kits, tmp_path / "n")
    ticket = kit.queue.enqueue("post_run_reflection", {"run_id": "r1"}, max_attempts=5)
    state = kit.wait_for_end(ticket.task_id)
    assert (state.status, state.attempt, state.error_kind) == (
        TaskStatus.FAILED,
        1,
        "unknown_kind",
    )
    assert state.error == (
        "no handler is registered for task kind 'post_run_reflection' (known: noop)"
    )


def test_a_task_that_cannot_start_before_its_expiry_never_runs(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    ran: list[str] = []
    kit = make(
        kits,
        tmp_path / "n",
        config=TasksConfig(workers=1, heartbeat_s=0.1, lease_s=0.5),
        handlers={"mark": lambda payload, context: ran.append(payload)},
    )
    busy = kit.queue.enqueue("noop", {"sleep_s": 1.0})  # the only worker is taken for 1 s
    kit.wait_for_kind(busy.task_id, "task.claimed")
    late = kit.queue.enqueue("mark", "late", expires_in_s=0.3)
    state = kit.wait_for_end(late.task_id)
    assert state.status is TaskStatus.EXPIRED and state.attempt == 0
    assert kit.kinds(late.task_id) == ["task.enqueued", "task.expired"]
    assert kit.wait_for_end(busy.task_id).status is TaskStatus.SUCCEEDED
    time.sleep(0.2)
    assert ran == []


def test_cancelling_a_running_task_sets_its_flag_and_records_the_cancel(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    started = threading.Event()
    seen: list[tuple[bool, str | None]] = []

    def slow(payload: Any, context: TaskContext) -> Any:
        started.set()
        context.wait(30)
        seen.append((context.cancelled, context.why))
        return {"finished": True}  # dropped: the task was cancelled

    kit = make(kits, tmp_path / "n", handlers={"slow": slow})
    ticket = kit.queue.enqueue("slow")
    assert started.wait(10)
    before = time.monotonic()
    state = kit.queue.cancel(ticket.task_id, by="user:alice", reason="not needed")
    assert state.status is TaskStatus.CANCELLED and state.cancelled_by == "user:alice"
    rows = kit.rows(ticket.task_id)
    assert [r.kind for r in rows] == ["task.enqueued", "task.claimed", "task.cancelled"]
    assert rows[-1].principal == "user:alice"
    # The handler stopped at once, its result was not recorded, and its worker is free again.
    follow = kit.queue.enqueue("noop")
    assert kit.wait_for_end(follow.task_id).status is TaskStatus.SUCCEEDED
    assert time.monotonic() - before < 5
    assert seen == [(True, "cancelled")]
    assert kit.kinds(ticket.task_id)[-1] == "task.cancelled"
    with pytest.raises(TaskNotActive):
        kit.queue.cancel(ticket.task_id, by="user:alice")
    with pytest.raises(UnknownTask):
        kit.queue.cancel(new_id(), by="user:alice")


def test_a_handler_past_its_deadline_fails_timeout_and_is_retried(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    kit = make(kits, tmp_path / "n", start=False)

    def stuck(payload: Any, context: TaskContext) -> Any:
        context.wait(30)
        context.check()

    kit.queue.register("stuck", stuck, timeout_s=0.2)
    kit.node.start()
    ticket = kit.queue.enqueue("stuck", max_attempts=2)
    state = kit.wait_for_end(ticket.task_id)
    assert (state.status, state.attempt, state.error_kind) == (TaskStatus.FAILED, 2, "timeout")
    assert "deadline of 0.2 s" in (state.error or "")


def test_heartbeats_keep_a_long_attempt_claimed(kits: list[TaskKit], tmp_path: Path) -> None:
    kit = make(kits, tmp_path / "n")  # lease 0.5 s, heartbeat every 0.1 s
    ticket = kit.queue.enqueue("noop", {"sleep_s": 1.5})
    state = kit.wait_for_end(ticket.task_id)
    kinds = kit.kinds(ticket.task_id)
    assert state.status is TaskStatus.SUCCEEDED and state.reclaims == 0
    assert kinds.count("task.claimed") == 1 and kinds.count("task.heartbeat") >= 5
    assert state.heartbeat_at_ms is not None and state.claimed_at_ms is not None
    assert state.heartbeat_at_ms - state.claimed_at_ms >= 1_000


def _claimed_by_a_dead_node(root: Path, max_attempts: int, lease_ms: int) -> str:
    """A journal holding a task claimed by a node incarnation that is gone."""
    root.mkdir(parents=True)
    with Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "key")) as journal:
        ticket, state = enqueue(journal, "noop", max_attempts=max_attempts)
        assert state is not None
        claim = TaskClaimed(
            task_id=ticket.task_id,
            attempt=1,
            worker=f"{new_id()}.0",
            lease_until_ms=time.time_ns() // 1_000_000 + lease_ms,
        )
        journal.append(task_stream(ticket.task_id), [claim], expected_seq=1, principal="node")
        return ticket.task_id


def test_a_claim_whose_holder_died_is_reclaimed_once_its_lease_lapses(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    task_id = _claimed_by_a_dead_node(tmp_path / "n", max_attempts=3, lease_ms=600)
    started = time.monotonic()
    kit = make(kits, tmp_path / "n")
    state = kit.wait_for_end(task_id)
    assert state.status is TaskStatus.SUCCEEDED
    assert (state.attempt, state.reclaims) == (2, 1)
    assert time.monotonic() - started >= 0.4  # not before the lease lapsed
    assert kit.kinds(task_id) == [
        "task.enqueued",
        "task.claimed",
        "task.claimed",
        "task.succeeded",
    ]


def test_a_lapsed_last_attempt_fails_the_task_lapsed(kits: list[TaskKit], tmp_path: Path) -> None:
    task_id = _claimed_by_a_dead_node(tmp_path / "n", max_attempts=1, lease_ms=0)
    kit = make(kits, tmp_path / "n")
    state = kit.wait_for_end(task_id)
    assert (state.status, state.error_kind, state.attempt) == (TaskStatus.FAILED, "lapsed", 1)
    assert kit.kinds(task_id) == ["task.enqueued", "task.claimed", "task.failed"]


def test_a_stopping_node_leaves_a_running_attempt_to_be_reclaimed(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    first = TaskKit(tmp_path / "n")
    ticket = first.queue.enqueue("noop", {"sleep_s": 30})
    first.wait_for_kind(ticket.task_id, "task.claimed")
    stopped = time.monotonic()
    first.close()  # the handler is told to stop; nothing is recorded for its attempt
    assert time.monotonic() - stopped < 5
    assert first.journal.committed_position >= 2
    kit = make(kits, tmp_path / "n")
    claim = kit.wait_until(
        lambda: next((r for r in kit.rows(ticket.task_id)[2:] if r.kind == "task.claimed"), None),
        "the reclaim",
    )
    assert isinstance(event := claim.decode(), TaskClaimed) and event.attempt == 2
    assert kit.kinds(ticket.task_id)[:2] == ["task.enqueued", "task.claimed"]
    kit.queue.cancel(ticket.task_id, by="user:alice")


def test_a_dedupe_key_enqueues_once(kits: list[TaskKit], tmp_path: Path) -> None:
    kit = make(kits, tmp_path / "n")
    first = kit.queue.enqueue("noop", {"run_id": "r1"}, dedupe_key="reflection:r1")
    again = kit.queue.enqueue("noop", {"run_id": "r1"}, dedupe_key="reflection:r1")
    assert (again.task_id, again.duplicate, first.duplicate) == (first.task_id, True, False)
    kit.wait_for_end(first.task_id)
    assert kit.kinds(first.task_id).count("task.enqueued") == 1


def idle_pool(kit: TaskKit) -> None:
    """Run one task to its end and wait until its worker is idle again (started, free)."""
    ticket = kit.queue.enqueue("noop", {})
    kit.wait_for_end(ticket.task_id)
    deadline = time.monotonic() + 5
    while kit.queue.running() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert kit.queue.running() == 0


def test_an_enqueue_finding_an_idle_worker_commits_its_claim_with_it(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    """The enqueue and the idle worker's claim are submitted together: the claim is durable
    when ``enqueue`` returns, and the journal commits both in one transaction as a rule (its
    writer may take the first alone; five tries, one shared commit at least)."""
    kit = make(kits, tmp_path / "n")
    together: list[bool] = []
    for _ in range(5):
        idle_pool(kit)
        heads: list[int] = []
        unlisten = kit.journal.listen(heads.append)
        ticket = kit.queue.enqueue("noop", {}, principal="user:alice")
        assert kit.kinds(ticket.task_id)[:2] == ["task.enqueued", "task.claimed"]
        unlisten()
        state = kit.wait_for_end(ticket.task_id)
        assert (state.status, state.attempt, state.result) == (
            TaskStatus.SUCCEEDED,
            1,
            {"ok": True},
        )
        rows = kit.rows(ticket.task_id)
        assert [r.kind for r in rows] == ["task.enqueued", "task.claimed", "task.succeeded"]
        assert [r.principal for r in rows] == ["user:alice", "node", "node"]
        claim = rows[1].decode()
        assert isinstance(claim, TaskClaimed) and claim.worker.startswith(kit.queue.node_id)
        together.append(not any(rows[0].position <= h < rows[1].position for h in heads))
    assert any(together), together


def test_a_duplicate_enqueue_finding_an_idle_worker_gives_it_back(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    kit = make(kits, tmp_path / "n", config=TasksConfig(workers=1, lease_s=5.0))
    idle_pool(kit)
    first = kit.queue.enqueue("noop", {"run_id": "r1"}, dedupe_key="reflection:r1")
    kit.wait_for_end(first.task_id)
    idle_pool(kit)
    again = kit.queue.enqueue("noop", {"run_id": "r1"}, dedupe_key="reflection:r1")
    assert (again.task_id, again.duplicate) == (first.task_id, True)
    assert kit.kinds(first.task_id) == ["task.enqueued", "task.claimed", "task.succeeded"]
    assert kit.queue.running() == 0
    after = kit.queue.enqueue("noop", {})  # the one worker is free for it
    assert kit.wait_for_end(after.task_id).status is TaskStatus.SUCCEEDED


def test_with_one_worker_tasks_start_in_enqueue_order(kits: list[TaskKit], tmp_path: Path) -> None:
    """An enqueue takes an idle worker only when the tasks the dispatcher has yet to place
    leave one free: it never overtakes them."""
    started: list[int] = []

    def note(payload: Any, context: TaskContext) -> Any:
        started.append(payload["i"])
        return {}

    kit = make(kits, tmp_path / "n", config=TasksConfig(workers=1), handlers={"note": note})
    tickets = [kit.queue.enqueue("note", {"i": i}) for i in range(40)]
    for ticket in tickets:
        assert kit.wait_for_end(ticket.task_id).status is TaskStatus.SUCCEEDED
    assert started == list(range(40))


@pytest.mark.parametrize(
    ("kind", "options", "field"),
    [
        ("Not A Kind", {}, "kind"),
        ("noop", {"payload": object()}, "payload"),
        ("noop", {"payload": "x" * 300_000}, "payload"),
        ("noop", {"max_attempts": 0}, "max_attempts"),
        ("noop", {"max_attempts": 101}, "max_attempts"),
        ("noop", {"delay_s": -1}, "delay_s"),
        ("noop", {"delay_s": 2, "expires_in_s": 1}, "expires_at_ms"),
        ("noop", {"dedupe_key": "has spaces"}, "dedupe_key"),
    ],
)
def test_bad_enqueue_input_names_the_field_and_writes_nothing(
    kits: list[TaskKit], tmp_path: Path, kind: str, options: dict[str, Any], field: str
) -> None:
    kit = make(kits, tmp_path / "n")
    head = kit.journal.committed_position
    payload = options.pop("payload", None)
    with pytest.raises(InvalidCommand) as refused:
        kit.queue.enqueue(kind, payload, **options)
    assert refused.value.field == field
    assert kit.journal.committed_position == head


def test_a_drain_is_a_barrier_for_what_the_dispatcher_was_told(tmp_path: Path) -> None:
    """Once ``drain`` returns, every attempt that will ever start is already counted by
    ``running``: the runtime stops waiting when it reaches 0, then signs its final checkpoint
    and closes the views, so an attempt handed out later would append after them."""

    def nap(payload: Any, context: TaskContext) -> Any:
        time.sleep(0.05)
        return {}

    for i in range(20):
        kit = TaskKit(tmp_path / f"n{i}", handlers={"nap": nap})
        try:
            ticket = kit.queue.enqueue("nap", {})
            kit.queue.drain()
            if kit.queue.running() == 0:
                time.sleep(0.15)
                assert kit.kinds(ticket.task_id) == ["task.enqueued"], i
        finally:
            kit.close()


def test_an_enqueue_or_cancel_while_the_queue_stops_is_answered_as_ever(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    """``stop`` drains, then stops the dispatcher, which is dead a moment before the queue
    forgets it. An enqueue in that moment (the learning feed's last reflections while the node
    stops: CI saw it raise) returns its ticket like any other: the task is in the journal, and
    the next start runs it. A cancel then is recorded as ever."""
    root = tmp_path / "n"
    first = TaskKit(root)
    try:
        first.wait_for_end(first.queue.enqueue("noop", {}).task_id)  # the dispatcher runs
        later = first.queue.enqueue("noop", {}, delay_s=60)
        first.queue.drain()
        dispatcher = first.queue._dispatcher  # the moment inside stop(), held open
        assert dispatcher is not None
        dispatcher.stop()
        ticket = first.queue.enqueue("noop", {"late": True}, principal="user:alice")
        assert first.kinds(ticket.task_id) == ["task.enqueued"]
        cancelled = first.queue.cancel(later.task_id, by="user:alice")
        assert cancelled.status is TaskStatus.CANCELLED
        assert first.kinds(later.task_id) == ["task.enqueued", "task.cancelled"]
    finally:
        first.close()
    kit = make(kits, root)
    assert kit.wait_for_end(ticket.task_id).status is TaskStatus.SUCCEEDED


def task_threads() -> list[str]:
    return sorted(
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("TaskDispatcher", "TaskWorker", "task-heartbeats"))
    )


def test_a_node_with_no_task_keeps_no_thread_for_the_queue_until_one_is_enqueued(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    """The queue costs a node that runs no task nothing: no dispatcher, worker or heartbeat
    thread until the first enqueue, and then only the workers attempts need."""
    before = task_threads()
    kit = make(kits, tmp_path / "n")
    assert task_threads() == before
    ticket = kit.queue.enqueue("noop", {})
    assert kit.wait_for_end(ticket.task_id).status is TaskStatus.SUCCEEDED
    started = [n for n in task_threads() if n not in before]
    assert sum(n.startswith("TaskDispatcher") for n in started) == 1
    assert sum(n.startswith("TaskWorker") for n in started) == 1  # of QUICK's 2
    assert sum(n == "task-heartbeats" for n in started) == 1


def test_a_node_restarted_with_an_unfinished_task_runs_it(
    kits: list[TaskKit], tmp_path: Path
) -> None:
    """A task left queued by the last run of the node starts the dispatcher with the node."""
    root = tmp_path / "n"
    root.mkdir()
    journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "key"))
    ticket, _ = enqueue(journal, "noop", {}, principal="node", max_attempts=1)
    journal.close()
    kit = make(kits, root)
    assert kit.wait_for_end(ticket.task_id).status is TaskStatus.SUCCEEDED
