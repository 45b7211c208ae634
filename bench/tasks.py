"""Task queue throughput: no-op tasks through the queue against bare journal appends, in the
same run.

- ``queue``: a real node (journal with ``synchronous=FULL``, the dispatcher and ``--workers``
  worker actors) runs ``--tasks`` no-op tasks: one thread enqueues them one after another with
  :meth:`actors.tasks.queue.TaskQueue.enqueue` (each returns once its ``task.enqueued`` is
  committed, as node code sees it), the workers claim and finish them meanwhile. Timed from the
  first enqueue until every task's ``task.succeeded`` is committed (probed every millisecond).
  Each task costs three appends: enqueued, claimed, succeeded.
- ``bare``: the same number of :meth:`events.Journal.append` calls of one ``task.enqueued``
  each, from one thread, to a fresh journal: what one durable event per task costs. The
  target is the ratio tasks/s over these appends/s (>= 0.5: a task through the whole queue
  costs at most twice one bare append).
- ``events``: for scale, the very events the queue wrote (read back from its journal),
  appended again one per append with the queue's concurrency (one thread for the enqueues,
  ``--workers`` threads for the claims and successes), without concurrency checks: how much
  of the queue's time is its own appends.

Each case runs ``--rounds`` times on fresh files, interleaved; the best round of each is
shown, and the target is judged on the median of each round's queue over the bare appends
measured right after it (the load of a shared machine drifts between rounds). Targets are
printed as PASS/MISS, never asserted.

- ``reflection``: runs/s through a whole node (:func:`transports.runtime.open_runtime`: the
  projector, the task queue, the learning view) with ``[learning] enabled`` on and off, the
  same workload, rounds interleaved: ``--reflection-sessions`` sessions each running
  ``--reflection-runs / sessions`` runs one after another (the next is sent when the last's
  ``run.completed`` is committed). Two workloads: ``plain``, the runs of bench/runs.py (one
  ``echo`` call each; every run after the first is similar to the others, so reflection finds
  a procedure and merges evidence until the candidate's evidence is full), and ``teaching``,
  where every run states a new fact (a candidate, a memory item and an apply per run: the
  most reflection ever writes), once as shipped and once with ``[memory] inject_k = 0`` on both
  sides: with it, later runs are shown the facts learned (the memory search over hundreds of
  near-identical items is most of that workload's cost, and is memory's, not reflection's);
  without it, what is left is reflection's own work. Runs/s is timed from the first run to the
  last ``run.completed``; how long the reflections take to be recorded after that is shown
  beside it. The target
  (reflection on / off >= 0.9: reflection does not slow runs) is judged on the median of
  each round's ratio, for each workload.

Run: ``.venv/bin/python bench/tasks.py [--tasks N] [--workers W]`` (a few minutes on 2 cores;
``--reflection-runs 0`` skips the reflection phase).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from actors import Node, ToolGate
from actors.tasks.queue import TasksConfig
from events import Journal, JournalReadPort, NodeKey, StoredEvent, new_id
from events.catalog import TaskEnqueued
from events.task_lifecycle import TASK_KINDS
from policies import PolicyEngine
from tools import ToolsConfig, build_catalog
from transports.models import DeterministicProvider

REPO = Path(__file__).resolve().parent.parent
TARGET_VS_BARE = 0.5
TARGET_REFLECTION = 0.9


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def show(label: str, what: str, figure: str, rest: str = "") -> None:
    print(f"{label:<8} {what:<48} {figure:>14}   {rest}".rstrip())


def queue_round(work: Path, tasks: int, workers: int) -> tuple[float, list[StoredEvent]]:
    """Tasks/s through a real node's queue, and the task events it wrote."""
    root = Path(tempfile.mkdtemp(prefix="queue-", dir=work))
    workspace = root / "workspace"
    workspace.mkdir()
    journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "node.key"))
    node = Node(
        journal=journal,
        provider=DeterministicProvider(),
        catalog=build_catalog(ToolsConfig(workspace_dir=str(workspace))),
        gate=ToolGate(PolicyEngine.load(None)),
        workspace=workspace,
        tasks=TasksConfig(workers=workers),
    )
    node.start()
    try:
        started = time.perf_counter()
        tickets = [node.tasks.enqueue("noop").task_id for _ in range(tasks)]
        # Tasks run in enqueue order, so the last is among the last to end: wait for it (one
        # stream's length, read after a commit, never polled), then for every task's end.
        last = f"task/{tickets[-1]}"
        deadline = started + 300

        def after_commits(done: Callable[[], bool], what: str) -> None:
            seen = journal.committed_position  # read before done(): no commit goes unseen
            while not done():
                head = journal.wait_for(seen, max(deadline - time.perf_counter(), 0))
                if head == seen:
                    raise RuntimeError(f"{what} within 300 s")
                seen = head

        after_commits(lambda: journal.stream_next_seq(last) >= 3, "the last task did not end")
        after_commits(
            lambda: len(journal.events_of_kinds(("task.succeeded",))) >= tasks,
            "not every task succeeded",
        )
        elapsed = time.perf_counter() - started
    finally:
        node.stop(grace_s=1.0)
    written = journal.events_of_kinds(tuple(sorted(TASK_KINDS)))
    journal.close(checkpoint=False)
    shutil.rmtree(root)
    return tasks / elapsed, written


def bare_round(work: Path, tasks: int) -> float:
    """Single-event appends/s from one thread: one ``task.enqueued`` per task."""
    root = Path(tempfile.mkdtemp(prefix="bare-", dir=work))
    journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "node.key"))
    events = [(new_id(), TaskEnqueued(task_id=new_id(), task_kind="noop")) for _ in range(tasks)]
    started = time.perf_counter()
    for task_id, event in events:
        journal.append(f"task/{task_id}", [event], expected_seq=0, principal="node")
    elapsed = time.perf_counter() - started
    journal.close(checkpoint=False)
    shutil.rmtree(root)
    return tasks / elapsed


def events_round(work: Path, written: list[StoredEvent], tasks: int, workers: int) -> float:
    """Tasks/s if the queue's own events were all it cost: the same rows appended again, one
    per append, the enqueues from one thread and the rest from ``workers`` threads."""
    root = Path(tempfile.mkdtemp(prefix="events-", dir=work))
    journal = Journal(root / "journal.db", node_key=NodeKey.load_or_create(root / "node.key"))
    enqueues = [r for r in written if r.kind == "task.enqueued"]
    rest = [r for r in written if r.kind != "task.enqueued"]
    shares = [rest[i::workers] for i in range(workers)]

    def append(rows: list[StoredEvent]) -> None:
        for row in rows:
            journal.append(row.stream, [row.decode()], expected_seq=None, principal=row.principal)

    threads = [threading.Thread(target=append, args=(enqueues,))]
    threads += [threading.Thread(target=append, args=(share,)) for share in shares]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    journal.close(checkpoint=False)
    shutil.rmtree(root)
    return tasks / elapsed


# --- reflection: runs/s with [learning] enabled on and off --------------------------------------

PLAIN = 'benchmark run: say hello back\n/tool echo {"text": "hi"}'
"""bench/runs.py's run: two turns, one ``echo`` call."""
TEACHING = "Remember that benchmark item {i} is stored in bin {i}."
"""A new fact in every run (each becomes a candidate, a memory item and an apply)."""
ENDS = ("run.completed", "run.failed", "run.cancelled")


def reflection_round(
    work: Path, runs: int, sessions: int, *, enabled: bool, text: str, inject: bool = True
) -> tuple[float, float, int]:
    """(runs/s, seconds from the last run's end until every reflection was recorded,
    candidates) for one whole node over a fresh data dir."""
    from actors.messages import StartRun
    from transports.config import LearningSection, MemoryConfig, NodeConfig
    from transports.runtime import open_runtime

    root = Path(tempfile.mkdtemp(prefix=f"reflect-{'on' if enabled else 'off'}-", dir=work))
    config = NodeConfig(
        learning=LearningSection(enabled=enabled),
        memory=MemoryConfig() if inject else MemoryConfig(inject_k=0),
    )
    runtime = open_runtime(root / "data", config=config)
    node, journal = runtime.node, runtime.journal
    per = runs // sessions
    waiting: dict[str, threading.Event] = {}
    ended: set[str] = set()
    """Runs whose end was read before their lane registered them."""
    guard = threading.Lock()
    wake = threading.Event()
    stop = threading.Event()
    seen = journal.committed_position

    def ends() -> None:  # one thread learns of every run's end from the journal's commits
        nonlocal seen
        while not stop.is_set():
            wake.wait(0.05)
            wake.clear()
            head = journal.committed_position
            for row in journal.events_of_kinds(ENDS, after_position=seen):
                with guard:
                    event = waiting.pop(row.correlation_id or "", None)
                    if event is None:
                        ended.add(row.correlation_id or "")
                if event is not None:
                    event.set()
            seen = max(seen, head)

    failures: list[BaseException] = []
    started_runs: set[str] = set()

    def lane(index: int) -> None:
        try:
            drive(index)
        except BaseException as exc:
            failures.append(exc)

    def drive(index: int) -> None:
        session = None
        for k in range(per):
            message = text.replace("{i}", str(index * per + k))
            done = threading.Event()
            start = StartRun(
                text=message, session_id=session, create=session is None, principal="user:bench"
            )
            ticket = node.ask(start)
            started_runs.add(ticket.run_id)
            session = ticket.session_id
            with guard:
                if ticket.run_id in ended:
                    done.set()
                else:
                    waiting[ticket.run_id] = done
            if not done.wait(60):
                raise RuntimeError(f"run {ticket.run_id} did not end")

    unsubscribe = journal.listen(lambda _head: wake.set())
    watcher = threading.Thread(target=ends, daemon=True)
    watcher.start()
    lanes = [threading.Thread(target=lane, args=(i,)) for i in range(sessions)]
    try:
        started = time.perf_counter()
        for thread in lanes:
            thread.start()
        for thread in lanes:
            thread.join()
        elapsed = time.perf_counter() - started
        if failures:
            raise failures[0]
        settled = time.perf_counter()
        deadline = settled + 300
        while enabled and not reflected(journal, started_runs):
            if time.perf_counter() > deadline:
                raise RuntimeError("reflections did not finish")
            time.sleep(0.01)
        lag = time.perf_counter() - settled
        runtime.projector.wait_for(journal.committed_position, 30)
        candidates = len(runtime.learning.view.candidates(limit=100_000))
    finally:
        stop.set()
        wake.set()
        unsubscribe()
        watcher.join(5)
        runtime.close(grace_s=1.0)
        shutil.rmtree(root, ignore_errors=True)
    return per * sessions / elapsed, lag if enabled else 0.0, candidates


def reflected(journal: JournalReadPort, runs: set[str]) -> bool:
    """Whether every run is in a reflection task's payload and every such task has ended."""
    from actors.learning.reflection import runs_of

    covered: set[str] = set()
    tasks = journal.events_of_kinds(("task.enqueued",))
    for row in tasks:
        event = row.decode()
        assert isinstance(event, TaskEnqueued)
        covered.update(runs_of(event.payload))
    ended = journal.events_of_kinds(("task.succeeded", "task.failed"))
    return runs <= covered and len({r.stream for r in ended}) >= len(tasks)


def reflection_phase(work: Path, runs: int, sessions: int, rounds: int) -> None:
    for name, text, inject in (
        ("plain", PLAIN, True),
        ("teaching", TEACHING, True),
        ("teaching, no memory shown", TEACHING, False),
    ):
        results: list[tuple[tuple[float, float, int], tuple[float, float, int]]] = []
        for _ in range(rounds):
            on = reflection_round(work, runs, sessions, enabled=True, text=text, inject=inject)
            off = reflection_round(work, runs, sessions, enabled=False, text=text, inject=inject)
            results.append((on, off))
        best_on = max(results, key=lambda r: r[0][0])[0]
        best_off = max(r[1][0] for r in results)
        show(
            "reflect",
            f"{name}: reflection on, {sessions} sessions",
            f"{best_on[0]:,.0f} runs/s",
            f"reflections recorded {best_on[1]:.2f} s after the last run; "
            f"{best_on[2]} candidate(s)",
        )
        show("reflect", f"{name}: reflection off", f"{best_off:,.0f} runs/s")
        ratios = sorted(on[0] / off[0] for on, off in results)
        ratio = statistics.median(ratios)
        each = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"{verdict(ratio >= TARGET_REFLECTION)}     {name} runs/s with reflection on vs off, "
            f"median of the rounds: {ratio:.2f} ({each}; target >= {TARGET_REFLECTION})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks per round")
    parser.add_argument("--workers", type=int, default=4, help="[tasks] workers (shipped: 4)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--reflection-runs", type=int, default=400, help="runs per reflection round (0: skip)"
    )
    parser.add_argument("--reflection-sessions", type=int, default=8)
    parser.add_argument("--reflection-rounds", type=int, default=3)
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / ".cache" / "bench",
        help="temp files go in a new directory under this one (same disk)",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tasks-", dir=args.dir))
    tasks, workers = args.tasks, args.workers
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine  {os.cpu_count()} cores, load average {load} (1/5/15 min) at start; "
        f"python {platform.python_version()}; {tasks:,} no-op tasks, {workers} workers, "
        f"best of {args.rounds} interleaved round(s); files in {work}"
    )
    rounds: list[tuple[float, float, float]] = []
    appends = 0
    try:
        if args.reflection_runs > 0:
            reflection_phase(
                work, args.reflection_runs, args.reflection_sessions, args.reflection_rounds
            )
        for _ in range(args.rounds):
            queue, written = queue_round(work, tasks, workers)
            appends = len(written)
            bare = bare_round(work, tasks)
            events = events_round(work, written, tasks, workers)
            rounds.append((queue, bare, events))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    queue = max(r[0] for r in rounds)
    bare = max(r[1] for r in rounds)
    events = max(r[2] for r in rounds)
    show(
        "queue",
        "enqueue -> succeeded, one enqueuing thread",
        f"{queue:,.0f} tasks/s",
        f"{appends / tasks:.1f} appends per task (best round)",
    )
    show("bare", "Journal.append, 1 event per task, 1 thread", f"{bare:,.0f} appends/s")
    show(
        "events",
        f"the queue's own events re-appended, 1+{workers} threads",
        f"{events:,.0f} tasks/s",
        f"queue / events {queue / events:.2f}",
    )
    # Each round's queue against the bare appends measured right after it (the machine's
    # load drifts between rounds); the median of those ratios is the figure.
    ratios = sorted(q / b for q, b, _ in rounds)
    ratio = statistics.median(ratios)
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(
        f"{verdict(ratio >= TARGET_VS_BARE)}     queue tasks/s vs bare appends/s, median of the "
        f"rounds: {ratio:.2f} ({each}; target >= {TARGET_VS_BARE})"
    )


if __name__ == "__main__":
    main()
