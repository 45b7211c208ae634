"""A task whose node is ``kill -9``ed mid-attempt is reclaimed by the next ``reel node`` once its
lease lapses, runs again, and exactly one ``task.succeeded`` is recorded.

Real processes throughout: the task is enqueued on the stopped data dir (the same
``actors.tasks.store.enqueue`` node code uses), ``reel node`` claims it and runs the built-in
``noop`` with a 3 s sleep, the test kills the process with SIGKILL while the handler sleeps,
and a second ``reel node`` on the same data dir finishes the task. ``reel tasks`` reads it
through the running node's API and from the journal once it stopped; ``reel journal verify``
and ``reel replay`` pass on the data dir afterwards.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from actors.tasks.store import enqueue
from events import Journal, JournalReader, NodeKey, StoredEvent
from events.catalog import TaskClaimed, TaskHeartbeat, TaskSucceeded
from events.task_lifecycle import task_stream
from tests import processes
from tests.actors.test_restart_equivalence import REEL, RestartableNode, reel
from tests.actors.test_restart_equivalence import daemons as daemons  # the fixture

CONFIG = """\
[http]
port = 0
[grpc]
port = 0
[tasks]
workers = 1
heartbeat_s = 0.2
lease_s = 1.0
"""
SLEEP_S = 3.0
DEADLINE_S = 30.0


def stream_of(data: Path, task_id: str) -> list[StoredEvent]:
    reader = JournalReader.open(data / "journal.db")
    try:
        return reader.read_stream(task_stream(task_id))
    finally:
        reader.close()


def wait_for(data: Path, task_id: str, kind: str, after: int = 0) -> list[StoredEvent]:
    """The task's stream once it holds more than ``after`` events of ``kind``."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rows = stream_of(data, task_id)
        if sum(r.kind == kind for r in rows) > after:
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"no {kind} for task {task_id}: {[r.kind for r in rows]}")
        time.sleep(0.05)


def test_a_task_killed_mid_attempt_runs_again_and_succeeds_once(
    tmp_path: Path, daemons: Callable[[Path], RestartableNode]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "config.toml").write_text(CONFIG)
    with Journal(data / "journal.db", node_key=NodeKey.load_or_create(data / "node.key")) as j:
        ticket, _ = enqueue(j, "noop", {"sleep_s": SLEEP_S}, principal="user:alice")
        later, _ = enqueue(j, "noop", delay_s=3600)
    task_id = ticket.task_id

    first = daemons(data)
    rows = wait_for(data, task_id, "task.claimed")
    first.kill9()  # mid-attempt: the handler sleeps for 3 s
    killed = stream_of(data, task_id)
    assert [r.kind for r in killed if r.kind != "task.heartbeat"] == [
        "task.enqueued",
        "task.claimed",
    ]
    lost = rows[1].decode()
    assert isinstance(lost, TaskClaimed) and lost.attempt == 1
    lease_end = max(
        e.lease_until_ms for r in killed if isinstance(e := r.decode(), TaskClaimed | TaskHeartbeat)
    )

    second = daemons(data)
    rows = wait_for(data, task_id, "task.succeeded")
    port = str(urlsplit(second.url).port)
    online = processes.run(
        [str(REEL), "tasks", "show", task_id, "--json", "--data", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REEL_HTTP_PORT": port},
    )
    assert online.returncode == 0, online.stderr
    shown = json.loads(online.stdout)
    assert (shown["state"], shown["attempts"], shown["reclaims"]) == ("succeeded", 2, 1)
    second.stop()

    claims = [e for r in rows if isinstance(e := r.decode(), TaskClaimed)]
    assert [c.attempt for c in claims] == [1, 2]
    assert claims[0].worker.split(".")[0] != claims[1].worker.split(".")[0]  # another node
    reclaim_row = next(r for r in rows if r.kind == "task.claimed" and r.stream_seq > 1)
    assert reclaim_row.recorded_at_ms >= lease_end  # not before the dead claim's lease lapsed
    successes = [e for r in rows if isinstance(e := r.decode(), TaskSucceeded)]
    assert len(successes) == 1 and successes[0].attempt == 2
    assert rows[-1].kind == "task.succeeded"

    offline = reel("tasks", "list", "--json", "--data", str(data))
    assert offline.returncode == 0, offline.stderr
    listed = {t["task_id"]: t["state"] for t in json.loads(offline.stdout)}
    assert listed == {task_id: "succeeded", later.task_id: "queued"}
    verified = reel("journal", "verify", "--data", str(data))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = reel("replay", "--data", str(data))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
