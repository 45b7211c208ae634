"""Child process for test_restart_equivalence.py: bring one run into a state, then wait to be
killed (``kill -9``).

Usage: ``python restart_child.py SCENARIO DATA_DIR``. Opens the data dir with ``open_runtime``
(as ``reel node`` does), starts the scenario's run(s), prints one JSON line with the run ids
once the run is in the scenario's state, and sleeps until the parent kills it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from actors.messages import CancelRun, StartRun
from transports.config import ApprovalsConfig, NodeConfig, ProviderConfig, ToolsSection
from transports.runtime import Runtime, open_runtime

APPROVAL = 'needs approval\n/tool shell.run {"argv": ["echo", "approved"]}'
SLOW_TOOL = 'slow tool\n/tool sleep {"seconds": 30}'
STREAMING = "streaming " + " ".join(f"word{i}" for i in range(400))
TIMEOUT_S = 1.5


def config(scenario: str) -> NodeConfig:
    """The node's settings for ``scenario`` (the restarted node uses the same)."""
    return NodeConfig(
        tools=ToolsSection(shell_allowlist=("echo",)),
        provider=ProviderConfig(chunk_delay_s=0.01 if scenario == "streaming" else 0.0),
        approvals=ApprovalsConfig(timeout_s=TIMEOUT_S if scenario == "timeout" else 600.0),
    )


def wait_for_kind(runtime: Runtime, run_id: str, kind: str) -> None:
    deadline = time.monotonic() + 20
    while not any(s.kind == kind for s in runtime.journal.read_correlated(run_id)):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {kind} in {run_id}")
        time.sleep(0.005)


def main(scenario: str, data_dir: Path) -> None:
    runtime = open_runtime(data_dir, config=config(scenario))
    node = runtime.node
    ids: dict[str, str] = {}
    if scenario == "queued":
        first = node.ask(StartRun(text="/sleep 30000\nfirst", session_key="q", create=True))
        second = node.ask(StartRun(text="second", session_key="q"))
        assert second.queued
        wait_for_kind(runtime, first.run_id, "run.started")
        ids = {"run": second.run_id, "first": first.run_id}
    elif scenario == "streaming":
        ticket = node.ask(StartRun(text=STREAMING, create=True))
        wait_for_kind(runtime, ticket.run_id, "run.output")
        ids = {"run": ticket.run_id}
    elif scenario in ("live", "offline", "timeout"):
        ticket = node.ask(StartRun(text=APPROVAL, create=True))
        wait_for_kind(runtime, ticket.run_id, "run.awaiting_approval")
        ids = {"run": ticket.run_id}
    elif scenario in ("tool", "cancelling"):
        ticket = node.ask(StartRun(text=SLOW_TOOL, create=True))
        wait_for_kind(runtime, ticket.run_id, "tool.decided")
        if scenario == "cancelling":
            node.send(CancelRun(run_id=ticket.run_id, principal="op"))
        ids = {"run": ticket.run_id}
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print(json.dumps(ids), flush=True)
    time.sleep(120)  # the parent kills us long before this


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
