"""The tasks view: built live by the projector while a real node runs tasks into every state,
each row equals the task's fold (one fact, one value), and ``replay`` rebuilds it identically
from the journal alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from actors.tasks.handlers import TaskContext
from actors.tasks.queue import TasksConfig, record_of
from actors.tasks.store import load_tasks
from events import JournalReader
from events.task_lifecycle import TaskStatus
from projections import Projector, TaskFilter, TasksView, replay
from tests.actors.taskkit import TaskKit

CONFIG = TasksConfig(workers=2, heartbeat_s=0.1, lease_s=0.5, backoff_base_s=30.0)
"""Long backoffs: a failed attempt stays ``retrying`` (or expires) while the test looks."""


def fail(payload: Any, context: TaskContext) -> Any:
    raise RuntimeError("always")


def test_the_view_is_the_fold_and_replays_identically(tmp_path: Path) -> None:
    kit = TaskKit(tmp_path / "n", config=CONFIG, handlers={"fail": fail})
    views = tmp_path / "n" / "views.db"
    projector = Projector(kit.journal, views)
    projector.follow(kit.journal)
    queue = kit.queue
    try:
        done = queue.enqueue("noop", {"n": 1}, principal="user:alice")
        retrying = queue.enqueue("fail", max_attempts=3)
        expired = queue.enqueue("fail", expires_in_s=0.5, max_attempts=3)
        failed = queue.enqueue("fail", max_attempts=1)
        unknown = queue.enqueue("nobody_handles_this")
        queued = queue.enqueue("noop", delay_s=3600)
        cancelled = queue.enqueue("noop", delay_s=3600, dedupe_key="once")
        queue.enqueue("noop", delay_s=3600, dedupe_key="once")  # the same task
        running = queue.enqueue("noop", {"sleep_s": 30})
        for ticket in (done, expired, failed, unknown):
            kit.wait_for_end(ticket.task_id)
        kit.wait_until(
            lambda: True if queue.get(retrying.task_id).status == "retrying" else None,  # type: ignore[union-attr]
            "the first failure",
        )
        kit.wait_for_kind(running.task_id, "task.heartbeat")
        queue.cancel(cancelled.task_id, by="user:bob", reason="changed my mind")
    finally:
        kit.node.stop(grace_s=0.2)  # the running attempt is left claimed
        projector.close(final_catch_up=True)
        kit.close()

    reader = JournalReader.open(tmp_path / "n" / "journal.db")
    view = TasksView(views)
    try:
        folded = {task_id: record_of(state) for task_id, state in load_tasks(reader).items()}
        rows = {r.task_id: r for r in view.tasks(limit=1000)}
        assert rows == folded
        states = {r.task_id: r.state for r in rows.values()}
        assert states == {
            done.task_id: TaskStatus.SUCCEEDED,
            retrying.task_id: TaskStatus.RETRYING,
            expired.task_id: TaskStatus.EXPIRED,
            failed.task_id: TaskStatus.FAILED,
            unknown.task_id: TaskStatus.FAILED,
            queued.task_id: TaskStatus.QUEUED,
            cancelled.task_id: TaskStatus.CANCELLED,
            running.task_id: TaskStatus.RUNNING,
        }
        assert rows[done.task_id].principal == "user:alice"
        assert rows[done.task_id].payload == {"n": 1}
        assert rows[expired.task_id].attempts == 1
        assert rows[cancelled.task_id].cancelled_by == "user:bob"
        assert rows[running.task_id].lease_until_ms is not None
        assert view.counts()["failed"] == 2
        assert [r.task_id for r in view.tasks(TaskFilter(state="failed"))] == sorted(
            (failed.task_id, unknown.task_id)
        )
        assert [r.task_id for r in view.tasks(TaskFilter(kind="fail", state="expired"))] == [
            expired.task_id
        ]
        page = view.tasks(limit=3)
        assert [r.task_id for r in page] == sorted(rows)[:3]
        assert [r.task_id for r in view.tasks(after=page[-1].task_id, limit=2)] == sorted(rows)[3:5]
        assert view.task("01ARZ3NDEKTSV4RRFFQ69G5FAV") is None

        report = replay(reader, views, tmp_path / "scratch.db")
        assert report.live and report.identical, report.differences
        assert report.head - report.position <= 1  # the closing checkpoint row, unprojected
    finally:
        view.close()
        reader.close()
