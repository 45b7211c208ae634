"""``reel tasks list | show | cancel`` as a user runs them: on a data dir no node holds (folded
from the journal, cancel appended as ``cli``) and through a running node's API (with the
token's own rights); bad input is exit 2 and one line, a finished task's cancel exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.tasks.store import enqueue
from events import Journal, JournalReader, NodeKey
from tests import processes
from tests.transports.http.httpkit import HttpNode, close_node, eventually, open_node
from transports.cli.errors import EXIT_DENIED

REEL = str(Path(sys.executable).with_name("reel"))
UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def reel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [REEL, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )


def one_line_error(done: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("reel: error: "), done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_tasks_offline(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with Journal(data / "journal.db", node_key=NodeKey.load_or_create(data / "node.key")) as j:
        first, _ = enqueue(j, "noop", {"n": 1}, principal="user:alice", delay_s=3600)
        second, _ = enqueue(j, "post_run_reflection", {"run_id": "r1"}, delay_s=3600)
    d = str(data)

    listed = reel("tasks", "list", "--data", d)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(first.task_id) and "queued" in lines[0]
    assert "post_run_reflection" in lines[1] and "attempts=0/3" in lines[1]
    kind = reel("tasks", "list", "--kind", "noop", "--json", "--data", d)
    assert [t["task_id"] for t in json.loads(kind.stdout)] == [first.task_id]
    shown = reel("tasks", "show", first.task_id, "--json", "--data", d)
    assert json.loads(shown.stdout)["principal"] == "user:alice"
    text = reel("tasks", "show", first.task_id, "--data", d)
    assert 'payload: {"n":1}' in text.stdout and "state: queued" in text.stdout

    cancelled = reel("tasks", "cancel", second.task_id, "--reason", "not now", "--data", d)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"cancelled task {second.task_id} (post_run_reflection)"
    again = reel("tasks", "cancel", second.task_id, "--data", d)
    one_line_error(again, 1, "already ended", "nothing changed")
    states = reel("tasks", "list", "--state", "cancelled", "--json", "--data", d)
    [row] = json.loads(states.stdout)
    assert (row["cancelled_by"], row["cancel_reason"]) == ("cli", "not now")
    reader = JournalReader.open(data / "journal.db")
    try:
        last = reader.read_stream(f"task/{second.task_id}")[-1]
        assert (last.kind, last.principal) == ("task.cancelled", "cli")
    finally:
        reader.close()

    one_line_error(reel("tasks", "list", "--state", "done", "--data", d), 2, "--state", "queued")
    one_line_error(reel("tasks", "list", "--kind", "Bad Kind", "--data", d), 2, "--kind")
    one_line_error(reel("tasks", "show", UNKNOWN, "--data", d), 2, "no task with id")
    one_line_error(reel("tasks", "show", "nope", "--data", d), 2, "ID", "task id")
    one_line_error(reel("tasks", "cancel", UNKNOWN, "--data", d), 2, "no task with id")


@pytest.fixture
def node(data_dir: Path) -> Iterator[HttpNode]:
    running = open_node(data_dir)
    try:
        yield running
    finally:
        close_node(running)


def test_tasks_through_a_running_node(node: HttpNode) -> None:
    env = {"REEL_HTTP_PORT": str(node.server.port)}
    d = str(node.runtime.data_dir)
    queue = node.runtime.node.tasks
    done = queue.enqueue("noop").task_id
    waiting = queue.enqueue("noop", delay_s=3600).task_id
    assert eventually(lambda: queue.get(done).status == "succeeded")  # type: ignore[union-attr]

    listed = reel("tasks", "list", "--json", "--data", d, env=env)
    assert listed.returncode == 0, listed.stderr
    assert {t["task_id"]: t["state"] for t in json.loads(listed.stdout)} == {
        done: "succeeded",
        waiting: "queued",
    }
    limited = reel("tasks", "list", "--limit", "1", "--json", "--data", d, env=env)
    assert [t["task_id"] for t in json.loads(limited.stdout)] == [done]
    one_line_error(reel("tasks", "show", UNKNOWN, "--data", d, env=env), 2, "no task with id")

    made = node.call("POST", "/v1/tokens", {"principal": "user:vera", "roles": ["viewer"]})
    viewer = {**env, "REEL_TOKEN": made.json()["token"]}
    assert reel("tasks", "show", waiting, "--data", d, env=viewer).returncode == 0
    refused = reel("tasks", "cancel", waiting, "--data", d, env=viewer)
    one_line_error(refused, EXIT_DENIED, "the node refused", "task.cancel")

    cancelled = reel("tasks", "cancel", waiting, "--reason", "ops", "--data", d, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert queue.get(waiting).cancelled_by == "admin"  # type: ignore[union-attr]
    one_line_error(reel("tasks", "cancel", done, "--data", d, env=env), 1, "nothing changed")
