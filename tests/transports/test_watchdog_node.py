"""The watchdog on a real node (journal, views, actors, the deterministic provider): a
deliberately stuck tool (a long ``sleep``), an approval left pending past its expiry, views held
behind the journal, and a journal altered under the node, in both modes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import apsw
import msgspec
import pytest

from actors.watchdog.actor import wall_ms
from actors.watchdog.checks import WatchdogConfig
from events import StoredEvent, new_id
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    IncidentOpened,
    IncidentResolved,
    RunFailed,
    TaskClaimed,
    TaskEnqueued,
    ToolCompleted,
)
from projections import WatchReads, replay
from tests.events.decoded import decoded
from tests.events.journal_testkit import replace_payload
from transports.config import HttpConfig, NodeConfig, ToolsSection, WatchdogSection
from transports.runtime import Runtime, open_runtime

T = TypeVar("T")
DEADLINE_S = 20.0
STUCK = '/tool sleep {"seconds": 25}'
"""A tool call that makes no progress for far longer than the tests' ``run_stall_s``."""
SHORT = '/tool sleep {"seconds": 1.5}'
SHELL = '/tool shell.run {"argv": ["echo", "yo"]}'
"""A call that waits for a human (critical: ask_each_time)."""


def until(probe: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def start(data_dir: Path, **watchdog: Any) -> Runtime:
    config = NodeConfig(
        http=HttpConfig(port=0),
        tools=ToolsSection(shell_allowlist=("echo",)),
        watchdog=WatchdogSection(**{"interval_s": 0.1, **watchdog}),
    )
    return open_runtime(data_dir, config=config)


@pytest.fixture
def opened(data_dir: Path) -> Iterator[Callable[..., Runtime]]:
    runtimes: list[Runtime] = []

    def make(**watchdog: Any) -> Runtime:
        runtime = start(data_dir, **watchdog)
        runtimes.append(runtime)
        return runtime

    yield make
    for runtime in runtimes:
        runtime.close(1.0)


def incident_rows(runtime: Runtime) -> list[StoredEvent]:
    return runtime.journal.events_of_kinds(("incident.opened", "incident.resolved"))


def opened_for(runtime: Runtime, subject: str) -> tuple[StoredEvent, IncidentOpened] | None:
    for stored in incident_rows(runtime):
        event = stored.decode()
        if isinstance(event, IncidentOpened) and event.subject == subject:
            return stored, event
    return None


def resolution(runtime: Runtime, incident_id: str) -> tuple[StoredEvent, IncidentResolved] | None:
    for stored in incident_rows(runtime):
        event = stored.decode()
        if isinstance(event, IncidentResolved) and event.incident_id == incident_id:
            return stored, event
    return None


def send(runtime: Runtime, text: str) -> str:
    from actors.messages import RunTicket, StartRun

    ticket = runtime.node.ask(StartRun(text=text, create=True))
    assert isinstance(ticket, RunTicket)
    return ticket.run_id


def ending(runtime: Runtime, run_id: str) -> StoredEvent | None:
    for stored in runtime.journal.read_correlated(run_id):
        if stored.kind in ("run.completed", "run.failed", "run.cancelled"):
            return stored
    return None


def first(runtime: Runtime, run_id: str, kind: str) -> StoredEvent | None:
    return next((s for s in runtime.journal.read_correlated(run_id) if s.kind == kind), None)


def views_caught_up(runtime: Runtime) -> bool:
    """Whether the views reach the journal's head, read from the file: a row is readable
    before ``committed_position`` (set after the commit's callers are answered) includes it."""
    head = runtime.journal.head().position
    return runtime.projector.wait_for(head, 10) >= head


# --- runs -------------------------------------------------------------------------------------


def test_observe_records_a_stuck_tool_and_the_run_goes_on(
    opened: Callable[..., Runtime],
) -> None:
    runtime = opened(run_stall_s=0.5)
    run_id = send(runtime, SHORT)
    stored, incident = until(lambda: opened_for(runtime, run_id), "a run incident")
    assert stored.principal == "watchdog"
    assert stored.stream == f"incident/{incident.incident_id}"
    assert incident.domain == "run"
    assert incident.action is None  # observe: record only
    evidence = incident.evidence
    assert evidence["measure"] == "seconds_without_tape_entry"
    assert evidence["limit"] == 0.5
    assert evidence["value"] > 0.5
    assert evidence["unit"] == "s"
    assert evidence["since_ms"] <= stored.recorded_at_ms - 500

    end = until(lambda: ending(runtime, run_id), "the run's end")
    assert end.kind == "run.completed"  # the tool finished its sleep, the run answered
    _, resolved = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert resolved.how == "cleared"
    # one incident for the run, however many looks saw it stalled
    opened_events = [s for s in incident_rows(runtime) if s.kind == "incident.opened"]
    assert len(opened_events) == 1

    assert views_caught_up(runtime)
    (record,) = runtime.incidents.incidents()
    assert (record.incident_id, record.domain, record.subject) == (
        incident.incident_id,
        "run",
        run_id,
    )
    assert (record.state, record.how, record.action) == ("resolved", "cleared", None)
    assert record.evidence == evidence


def test_auto_fails_a_stalled_run_as_the_watchdog(opened: Callable[..., Runtime]) -> None:
    runtime = opened(run_stall_s=0.5, mode="auto")
    run_id = send(runtime, STUCK)
    _, incident = until(lambda: opened_for(runtime, run_id), "a run incident")
    assert incident.action == "fail_run"

    end = until(lambda: ending(runtime, run_id), "the run's end", timeout=10)
    assert end.kind == "run.failed"
    failed = decoded(end, RunFailed)
    assert failed.reason == "stalled"
    assert "run_stall_s" in failed.message
    assert end.principal == "watchdog"  # the watchdog's act, recorded as such
    completed = first(runtime, run_id, "tool.completed")
    assert completed is not None and completed.position < end.position  # stopped, then ended
    _, resolved = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert resolved.how == "acted"


def test_a_run_waiting_for_a_human_is_not_stalled(opened: Callable[..., Runtime]) -> None:
    runtime = opened(run_stall_s=0.3, mode="auto")
    run_id = send(runtime, SHELL)
    until(lambda: first(runtime, run_id, "run.awaiting_approval"), "the run to wait")
    watchdog = runtime.node.watchdog
    assert watchdog is not None
    looks = watchdog.proxy().looks.get()
    until(lambda: watchdog.proxy().looks.get() >= looks + 5, "five more looks")
    assert opened_for(runtime, run_id) is None
    assert ending(runtime, run_id) is None


# --- approvals -------------------------------------------------------------------------------

AN_HOUR_MS = 3_600_000


def later(runtime: Runtime, mode: str) -> None:
    """Replace the node's watchdog by one whose clock reads an hour ahead: every approval is
    then past its ``expires_at`` (ten minutes) and grace, while its own time-out is not due."""
    views = runtime.data_dir / "views.db"
    reads = WatchReads(views, runtime.journal, runtime.journal, runtime.projector)
    config = WatchdogConfig(interval_s=0.1, approval_grace_s=1.0, mode=mode)  # type: ignore[arg-type]
    runtime.node.watch(reads, config, clock=lambda: wall_ms() + AN_HOUR_MS)


def test_observe_records_an_overdue_approval(opened: Callable[..., Runtime]) -> None:
    runtime = opened()
    run_id = send(runtime, SHELL)
    requested = until(lambda: first(runtime, run_id, "tool.approval_requested"), "a request")
    approval_id = decoded(requested, ApprovalRequested).approval_id
    until(lambda: views_caught_up(runtime), "the views")
    later(runtime, "observe")
    opened_row, incident = until(lambda: opened_for(runtime, approval_id), "an approval incident")
    assert opened_row.principal == "watchdog"
    assert incident.domain == "approval"
    assert incident.action is None
    assert incident.evidence["measure"] == "seconds_pending_past_expiry"
    assert incident.evidence["since_ms"] == decoded(requested, ApprovalRequested).expires_at_ms
    assert incident.evidence["detail"] == f"run {run_id}"
    time.sleep(0.5)
    assert first(runtime, run_id, "tool.approval_resolved") is None  # observe decides nothing


def test_auto_expires_an_overdue_approval_through_the_decision_path(
    opened: Callable[..., Runtime],
) -> None:
    runtime = opened()
    run_id = send(runtime, SHELL)
    requested = until(lambda: first(runtime, run_id, "tool.approval_requested"), "a request")
    approval_id = decoded(requested, ApprovalRequested).approval_id
    until(lambda: views_caught_up(runtime), "the views")
    later(runtime, "auto")
    _, incident = until(lambda: opened_for(runtime, approval_id), "an approval incident")
    assert incident.action == "expire_approval"
    decided = until(lambda: first(runtime, run_id, "tool.approval_resolved"), "the denial")
    resolved = decoded(decided, ApprovalResolved)
    assert (resolved.decision, resolved.decided_by, resolved.reason) == (
        "deny",
        "watchdog",
        "expired",
    )
    assert decided.principal == "watchdog"
    end = until(lambda: ending(runtime, run_id), "the run's end")
    assert end.kind == "run.completed"  # the denial went back to the model; the run answered
    completed = first(runtime, run_id, "tool.completed")
    assert completed is not None
    assert "denied by watchdog: expired" in (decoded(completed, ToolCompleted).error or "")
    _, done = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert done.how == "acted"


# --- tasks -----------------------------------------------------------------------------------


def orphan_task(runtime: Runtime) -> str:
    """A ``noop`` task claimed by a worker of a node that died, its lease lapsed a minute ago,
    and unknown to this node's dispatcher (written behind its back, as a node killed mid-task
    leaves it): nothing but the watchdog will notice it."""
    # The dispatcher folds the journal's tasks when it starts: let it finish starting first
    # (a task it ran end to end proves it), so it cannot learn of the orphan that way.
    warm = runtime.node.tasks.enqueue("noop").task_id
    until(lambda: "task.succeeded" in task_kinds(runtime, warm), "the dispatcher to run a task")
    task_id = new_id()
    now = wall_ms()
    journal = runtime.journal
    journal.append(
        f"task/{task_id}",
        [TaskEnqueued(task_id=task_id, task_kind="noop", payload={})],
        expected_seq=0,
        principal="node",
    )
    journal.append(
        f"task/{task_id}",
        [
            TaskClaimed(
                task_id=task_id, attempt=1, worker="01DEADNODE.1", lease_until_ms=now - 60_000
            )
        ],
        expected_seq=1,
        principal="node",
    )
    return task_id


def task_kinds(runtime: Runtime, task_id: str) -> list[str]:
    return [s.kind for s in runtime.journal.read_stream(f"task/{task_id}")]


def test_observe_records_a_lapsed_task(opened: Callable[..., Runtime]) -> None:
    runtime = opened(task_lapse_s=1.0)
    task_id = orphan_task(runtime)
    stored, incident = until(lambda: opened_for(runtime, task_id), "a task incident")
    assert stored.principal == "watchdog"
    assert (incident.domain, incident.action) == ("task", None)
    evidence = incident.evidence
    assert evidence["measure"] == "seconds_past_lease" and evidence["value"] > 60
    assert evidence["detail"].startswith("held by 01DEADNODE.1, last heartbeat")
    time.sleep(0.5)
    assert task_kinds(runtime, task_id) == ["task.enqueued", "task.claimed"]  # left alone


def test_auto_reclaims_a_lapsed_task_through_the_queue(opened: Callable[..., Runtime]) -> None:
    runtime = opened(task_lapse_s=1.0, mode="auto")
    task_id = orphan_task(runtime)
    _, incident = until(lambda: opened_for(runtime, task_id), "a task incident")
    assert incident.action == "reclaim_task"
    until(lambda: "task.succeeded" in task_kinds(runtime, task_id), "the reclaimed task to run")
    reclaim = runtime.journal.read_stream(f"task/{task_id}")[2]
    assert reclaim.kind == "task.claimed" and decoded(reclaim, TaskClaimed).attempt == 2
    _, resolved = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert resolved.how == "acted"


# --- the projector ----------------------------------------------------------------------------


def test_views_held_behind_the_journal_open_and_clear_a_projector_incident(
    opened: Callable[..., Runtime],
) -> None:
    runtime = opened(projector_lag_events=2, projector_lag_s=0.3)
    send(runtime, "warm up")  # views.db has every table
    until(lambda: views_caught_up(runtime), "the views")
    holder = apsw.Connection(str(runtime.data_dir / "views.db"))
    holder.set_busy_timeout(5000)
    holder.execute("BEGIN IMMEDIATE")  # the projector cannot write views.db until it ends
    try:
        run_id = send(runtime, "while the views are held")
        until(lambda: ending(runtime, run_id), "the run's end")
        stored, incident = until(lambda: opened_for(runtime, "views"), "a projector incident")
        assert incident.domain == "projector"
        evidence = incident.evidence
        assert evidence["measure"] == "events_behind_journal"
        assert evidence["limit"] == 2 and evidence["value"] > 2
        assert stored.recorded_at_ms - evidence["since_ms"] >= 300
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    _, resolved = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert resolved.how == "cleared"


# --- the journal ------------------------------------------------------------------------------


@contextmanager
def tamper(path: Path) -> Iterator[apsw.Connection]:
    """A raw connection to a live node's journal with the append-only triggers dropped (it
    waits for the node's writer between commits); commits on exit."""
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(10_000)
    try:
        conn.execute("DROP TRIGGER IF EXISTS events_append_only_update")
        with conn:
            yield conn
    finally:
        conn.close()


def test_a_journal_altered_under_the_node_opens_a_journal_incident(
    opened: Callable[..., Runtime],
) -> None:
    runtime = opened(journal_check_s=0.2)
    run_id = send(runtime, "something to alter")
    until(lambda: ending(runtime, run_id), "the run's end")
    row = runtime.journal.read_correlated(run_id)[-1]
    path = runtime.data_dir / "journal.db"
    with tamper(path) as conn:
        original = bytes(
            conn.execute("SELECT payload FROM events WHERE position = ?", (row.position,)).get
        )
        altered = msgspec.msgpack.encode({**msgspec.msgpack.decode(original), "answer": "forged"})
        replace_payload(conn, row.position, altered, row.kind)
    _, incident = until(lambda: opened_for(runtime, "journal"), "a journal incident")
    assert incident.domain == "journal"
    assert incident.evidence["value"] == row.position
    assert incident.evidence["measure"] == "first_bad_position"
    with tamper(path) as conn:
        replace_payload(conn, row.position, original, row.kind)
    _, resolved = until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    assert resolved.how == "cleared"


# --- replay -----------------------------------------------------------------------------------


def test_the_incidents_view_is_rebuilt_identically(opened: Callable[..., Runtime]) -> None:
    runtime = opened(run_stall_s=0.3)
    run_id = send(runtime, SHORT)
    _, incident = until(lambda: opened_for(runtime, run_id), "a run incident")
    until(lambda: resolution(runtime, incident.incident_id), "the resolution")
    data_dir = runtime.data_dir
    runtime.close(1.0)
    from events import JournalReader

    reader = JournalReader.open(data_dir / "journal.db")
    try:
        report = replay(reader, data_dir / "views.db", data_dir / "replayed.db")
    finally:
        reader.close()
    assert report.identical, report.differences
    conn = apsw.Connection(str(data_dir / "replayed.db"))
    try:
        rows = conn.execute("SELECT incident_id, state, how FROM incidents").fetchall()
    finally:
        conn.close()
    assert rows == [(incident.incident_id, "resolved", "cleared")]
