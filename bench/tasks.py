"""Task queue throughput: no-op tasks through the queue against bare journal appends, in the
same run.

- ``queue``: a real node (journal with ``synchronous=FULL``, the dispatcher and ``--workers``
  worker actors) runs ``--tasks`` no-op tasks: one thread enqueues them one after another with
  :meth:`actors.tasks.TaskQueue.enqueue` (each returns once its ``task.enqueued`` is committed,
  as node code sees it), the workers claim and finish them meanwhile. Timed from the first
  enqueue until every task's ``task.succeeded`` is committed (probed every millisecond).
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

Run: ``.venv/bin/python bench/tasks.py [--tasks N] [--workers W]`` (about 20 s on 2 cores).
Reflection's effect on runs/s is measured by whoever builds reflection.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

# Run as a script, bench/ comes first on sys.path, where bench/http.py would shadow the
# standard library's ``http`` that aiohttp imports: drop the folder.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from actors import Node, ToolGate  # noqa: E402
from actors.tasks import TasksConfig  # noqa: E402
from events import Journal, NodeKey, StoredEvent, new_id  # noqa: E402
from events.catalog import TaskEnqueued  # noqa: E402
from events.task_lifecycle import TASK_KINDS  # noqa: E402
from policies import PolicyEngine  # noqa: E402
from tools import ToolsConfig, build_catalog  # noqa: E402
from transports.models import DeterministicProvider  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TARGET_VS_BARE = 0.5


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
        # Tasks run in enqueue order, so the last is among the last to end: wait for it (a
        # cheap probe of one stream's length), then make sure every task has ended.
        last = f"task/{tickets[-1]}"
        deadline = started + 300
        while journal.stream_next_seq(last) < 3:
            if time.perf_counter() > deadline:
                raise RuntimeError("the last task did not end")
            time.sleep(0.001)
        while len(journal.events_of_kinds(("task.succeeded",))) < tasks:
            time.sleep(0.001)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=2000, help="no-op tasks per round")
    parser.add_argument("--workers", type=int, default=4, help="[tasks] workers (shipped: 4)")
    parser.add_argument("--rounds", type=int, default=5)
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
