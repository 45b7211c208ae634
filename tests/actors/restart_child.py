"""Child process for test_restart_equivalence.py: bring a run into one state, then die by
``kill -9``.

Usage: ``python restart_child.py SCENARIO DATA_DIR``. Opens the data dir with ``open_runtime``
(the composition ``reel node`` uses; the settings come from ``DATA_DIR/config.toml``, which the
test writes, so the restarted ``reel node`` runs with the same ones), starts the scenario's
run(s), and prints one JSON line with the ids once the run is in the scenario's state. Then:

* ``queued``: a run sleeping in the provider and a second run of the same session queued
  behind it; waits for the parent's SIGKILL.
* ``streaming``: a run streaming its answer slowly (``provider.chunk_delay_s``) with some
  ``run.output`` already on its tape; waits for the parent's SIGKILL.
* ``tool``: a run whose ``sleep`` tool is executing (``tool.decided`` allow on the tape);
  waits for the parent's SIGKILL.
* ``cancelling``: as ``tool``, then asks for the run's cancellation and SIGKILLs itself just
  before the first append that follows (the tool's ``tool.completed``), so the node dies while
  the run is being cancelled and before its end is written. The window is hit every time: the
  process kills itself from inside the journal's ``submit``, before the row is written.
* ``marking``: a run of ``shell.run`` that dies just before ``run.awaiting_approval`` is
  appended (``tool.approval_requested`` is on the tape, the run is not yet marked waiting).
* ``decided``: a run of ``shell.run`` waiting for its approval; the approval is allowed live
  (principal ``operator``) and the process dies just before the run's next append
  (``run.resumed``): the decision is on the tape, the run has not acted on it.
* ``cancel_awaiting``: a run of ``shell.run`` waiting for its approval; its cancellation is
  asked for and the process SIGKILLs itself just before the first append that follows
  (``run.cancel_requested``), so nothing of the cancellation reaches the journal.
* ``cancel_denied``: as ``cancel_awaiting``, but the process dies just before the append of the
  node's denial and the invocation's ``tool.completed``: ``run.cancel_requested`` is on the
  tape, the approval, the invocation and the run are not yet closed.
* ``twin``: the same run as ``decided`` without a crash: it ends, then the child stops the node
  cleanly and exits 0 (the reference tape for ``marking`` and ``decided``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.messages import CancelRun, ResolveApproval, StartRun
from events.catalog import RunAwaitingApproval, ToolCompleted
from events.lifecycle import TERMINAL_KINDS
from transports.runtime import Runtime, open_runtime

QUEUED_FIRST = "/sleep 30000\nfirst in line"
QUEUED_SECOND = "second in line"
STREAMING = "streaming " + " ".join(f"word{i}" for i in range(400))
SLOW_TOOL = 'slow tool\n/tool sleep {"seconds": 30}'
APPROVAL = 'needs approval\n/tool shell.run {"argv": ["echo", "approved"]}'


def wait_for_kind(runtime: Runtime, run_id: str, *kinds: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        head = runtime.journal.committed_position
        if any(s.kind in kinds for s in runtime.journal.read_correlated(run_id)):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {kinds} in {run_id}")
        runtime.journal.wait_for(head, timeout=0.05)


def die_before(runtime: Runtime, fatal: Callable[[str, Any, dict[str, Any]], bool]) -> None:
    """SIGKILL this process just before an append for which ``fatal(stream, events, fields)``
    holds (nothing of that append is written)."""
    journal = runtime.journal
    submit, append = journal.submit, journal.append

    def guarded_submit(stream: str, events: Any, **fields: Any) -> Any:
        if fatal(stream, events, fields):
            os.kill(os.getpid(), signal.SIGKILL)
        return submit(stream, events, **fields)

    def guarded_append(stream: str, events: Any, **fields: Any) -> Any:
        if fatal(stream, events, fields):
            os.kill(os.getpid(), signal.SIGKILL)
        return append(stream, events, **fields)

    # Both: an append that finds no commit under way commits without going through submit.
    journal.submit = guarded_submit  # type: ignore[method-assign]
    journal.append = guarded_append  # type: ignore[method-assign]


def main(scenario: str, data_dir: Path) -> None:
    runtime = open_runtime(data_dir)
    node = runtime.node
    if scenario == "marking":  # armed before the run starts; says which run before it dies
        die_before(runtime, announce_awaiting)
    if scenario == "queued":
        first = node.ask(StartRun(text=QUEUED_FIRST, session_key="queue", create=True))
        second = node.ask(StartRun(text=QUEUED_SECOND, session_key="queue"))
        assert not first.queued and second.queued
        wait_for_kind(runtime, first.run_id, "run.started")
        ids = {"run": second.run_id, "first": first.run_id, "session": first.session_id}
    elif scenario == "streaming":
        ticket = node.ask(StartRun(text=STREAMING, create=True))
        wait_for_kind(runtime, ticket.run_id, "run.output")
        ids = {"run": ticket.run_id, "session": ticket.session_id}
    elif scenario in ("tool", "cancelling"):
        ticket = node.ask(StartRun(text=SLOW_TOOL, create=True))
        wait_for_kind(runtime, ticket.run_id, "tool.decided")
        ids = {"run": ticket.run_id, "session": ticket.session_id}
    elif scenario == "marking":
        node.send(StartRun(text=APPROVAL, create=True))
        time.sleep(120)  # dies before run.awaiting_approval
        raise SystemExit("the run was never marked awaiting approval")
    elif scenario in ("decided", "twin", "cancel_awaiting", "cancel_denied"):
        ticket = node.ask(StartRun(text=APPROVAL, create=True))
        wait_for_kind(runtime, ticket.run_id, "run.awaiting_approval")
        ids = {"run": ticket.run_id, "session": ticket.session_id}
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    run_id = ids["run"]
    if scenario == "twin":
        decide(runtime, run_id)
        wait_for_kind(runtime, run_id, *TERMINAL_KINDS)
        runtime.close(grace_s=1.0)
        print(json.dumps(ids), flush=True)
        return
    print(json.dumps(ids), flush=True)
    if scenario == "cancelling":
        die_before(runtime, lambda _s, _e, fields: fields.get("correlation_id") == run_id)
        node.send(CancelRun(run_id=run_id, principal="operator"))
    elif scenario == "decided":
        die_before(runtime, lambda stream, _e, _f: stream == f"run/{run_id}")
        decide(runtime, run_id)
    elif scenario == "cancel_awaiting":
        die_before(runtime, lambda _s, _e, fields: fields.get("correlation_id") == run_id)
        node.send(CancelRun(run_id=run_id, principal="operator"))
    elif scenario == "cancel_denied":
        die_before(
            runtime,
            lambda _s, events, fields: (
                fields.get("correlation_id") == run_id
                and any(isinstance(e, ToolCompleted) for e in events)
            ),
        )
        node.send(CancelRun(run_id=run_id, principal="operator"))
    time.sleep(120)  # killed long before this


def announce_awaiting(_stream: str, events: Any, _fields: dict[str, Any]) -> bool:
    """For ``marking``: print the run's id when it is about to be marked waiting."""
    marking = [e for e in events if isinstance(e, RunAwaitingApproval)]
    if marking:
        print(json.dumps({"run": marking[0].run_id}), flush=True)
    return bool(marking)


def decide(runtime: Runtime, run_id: str) -> None:
    """Allow the run's pending approval, live, as the principal ``operator``."""
    request = next(
        s.decode()
        for s in runtime.journal.read_correlated(run_id)
        if s.kind == "tool.approval_requested"
    )
    approval_id: str = request.approval_id  # type: ignore[attr-defined]
    runtime.node.send(ResolveApproval(approval_id=approval_id, decision="allow"))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
