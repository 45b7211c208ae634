"""A node SIGKILLed in the middle of a batch of read-only calls (two of four recorded, two in
flight) resumes the run from the journal (actors/system/recovery.py, the same folds and decider
as the live run): the two results recorded stay, the two cut off are decided again and run
again, and the run completes with all four, recorded once each in proposal order."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from events import verify
from events.catalog import RunCompleted
from tests.actors.runs.parallel_child import CONFIG
from tests.actors.runs.readserver import ReadServer
from tests.actors.test_actors_crash_restart import on_sqlite, read_line, wait_tape
from transports.runtime import open_runtime

CHILD = Path(__file__).with_name("parallel_child.py")


@pytest.fixture
def server() -> Iterator[ReadServer]:
    server = ReadServer()
    server.start()
    yield server
    server.release()
    server.stop()


def test_a_run_killed_with_two_of_four_parallel_reads_done_resumes_and_completes(
    data_dir: Path, server: ReadServer
) -> None:
    process = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), server.base],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = json.loads(read_line(process, timeout=60))["run_id"]
        deadline = time.monotonic() + 30
        while server.in_flight < 2:  # the two held reads are at the server when it dies
            assert time.monotonic() < deadline, f"held reads never arrived: {server.seen}"
            time.sleep(0.01)
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)
    assert process.returncode == -signal.SIGKILL
    server.release()  # from now on every read is answered at once

    runtime = open_runtime(data_dir, config=CONFIG)
    try:
        assert [r.state.run_id for r in runtime.node.recovery.resumed] == [run_id]
        assert runtime.node.recovery.interrupted_runs == ()
        end = wait_tape(runtime, run_id, "run.completed", timeout=30)
        tape: list[tuple[str, Any]] = [
            (s.kind, s.decode()) for s in runtime.journal.read_correlated(run_id)
        ]
        assert verify(on_sqlite(runtime)).ok
    finally:
        runtime.close(grace_s=0.5)

    assert isinstance(end, RunCompleted)
    for n in (1, 2, 3, 4):
        assert f"read {n}" in end.answer
    call_of = {e.invocation_id: e.call_id for k, e in tape if k == "tool.proposed"}
    completed = [call_of[e.invocation_id] for k, e in tape if k == "tool.completed"]
    assert completed == ["call_1", "call_2", "call_3", "call_4"]  # once each, in order
    assert all(e.ok for k, e in tape if k == "tool.completed")
    decided = [call_of[e.invocation_id] for k, e in tape if k == "tool.decided"]
    # Recorded results are not run again; the two cut off were decided again at the restart.
    assert sorted(decided) == ["call_1", "call_2", "call_3", "call_3", "call_4", "call_4"]
    assert sorted(server.seen) == [1, 2, 3, 3, 4, 4]
    assert [k for k, _ in tape].count("run.started") == 1
    assert tape[-1][0] == "run.completed"
