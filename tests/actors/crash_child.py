"""Child process for test_actors_crash_restart.py: a node with two runs in flight, then wait to
be killed.

Usage: ``python crash_child.py DATA_DIR``. Opens the data dir with ``open_runtime`` (as
``reel node`` does), starts a run that sleeps in the provider and one that waits for an approval
of ``shell.run``, prints one JSON line with their ids once both are in that state, and sleeps
until the parent kills it with SIGKILL.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from actors.messages import StartRun
from transports.config import NodeConfig, ToolsSection
from transports.runtime import open_runtime

CONFIG = NodeConfig(tools=ToolsSection(shell_allowlist=("echo",)))
APPROVAL_TEXT = 'needs approval\n/tool shell.run {"argv": ["echo", "resumed"]}'


def wait_for_kind(runtime: object, run_id: str, kind: str) -> None:
    journal = runtime.journal  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    while not any(s.kind == kind for s in journal.read_correlated(run_id)):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {kind} in {run_id}")
        time.sleep(0.01)


def main(data_dir: Path) -> None:
    runtime = open_runtime(data_dir, config=CONFIG)
    node = runtime.node
    sleeping = node.ask(StartRun(text="/sleep 30000\nslow", session_key="sleeper", create=True))
    waiting = node.ask(StartRun(text=APPROVAL_TEXT, session_key="approver", create=True))
    wait_for_kind(runtime, sleeping.run_id, "run.started")
    wait_for_kind(runtime, waiting.run_id, "run.awaiting_approval")
    ids = {
        "sleeping": sleeping.run_id,
        "sleeping_session": sleeping.session_id,
        "waiting": waiting.run_id,
        "waiting_session": waiting.session_id,
    }
    print(json.dumps(ids), flush=True)
    time.sleep(120)  # the parent kills us long before this


if __name__ == "__main__":
    main(Path(sys.argv[1]))
