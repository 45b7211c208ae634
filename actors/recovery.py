"""Start-up recovery: resolve from the journal whatever a crash left in flight.

Before any actor starts: every run the journal shows accepted but not ended fails with reason
``interrupted``; its tool invocations that never completed are completed as ``interrupted``,
and an approval still pending is closed (denied, reason ``interrupted``) — reel does not resume
a run mid-loop after a restart (docs/operations.md says so). The run's terminal event is written
last, so it stays the last entry of its tape. ``always`` grants are reloaded into the gate.
"""

from __future__ import annotations

import msgspec

from actors.gate import ToolGate
from events import Journal, StoredEvent
from events.catalog import ApprovalRequested, ApprovalResolved, RunFailed, ToolCompleted

TERMINAL_KINDS = ("run.completed", "run.failed", "run.cancelled")
INTERRUPTED = "the node stopped while this was in flight"


class RecoveryReport(msgspec.Struct, frozen=True):
    """What recovery resolved."""

    interrupted_runs: tuple[str, ...] = ()
    closed_approvals: tuple[str, ...] = ()
    always_grants: int = 0


def recover(journal: Journal, gate: ToolGate) -> RecoveryReport:
    """Resolve in-flight runs, tools and approvals; reload ``always`` grants."""
    accepted = [e.correlation_id for e in journal.events_of_kinds(("run.accepted",))]
    ended = {e.correlation_id for e in journal.events_of_kinds(TERMINAL_KINDS)}
    runs: list[str] = []
    approvals: list[str] = []
    for run_id in accepted:
        if run_id is None or run_id in ended:
            continue
        approvals.extend(_close_tools(journal, run_id))
        stream = f"run/{run_id}"
        journal.append(
            stream,
            [RunFailed(run_id=run_id, reason="interrupted", message=INTERRUPTED)],
            expected_seq=journal.stream_next_seq(stream),
            principal="node",
            correlation_id=run_id,
        )
        runs.append(run_id)
    grants = 0
    for stored in journal.events_of_kinds(("tool.approval_resolved",)):
        event = stored.decode()
        if (
            isinstance(event, ApprovalResolved)
            and event.decision == "allow"
            and (event.scope == "always" and event.tool and event.grant_principal)
        ):
            gate.grant_always(event.grant_principal, event.tool)
            grants += 1
    return RecoveryReport(tuple(runs), tuple(approvals), grants)


def _close_tools(journal: Journal, run_id: str) -> list[str]:
    by_stream: dict[str, list[StoredEvent]] = {}
    for stored in journal.read_correlated(run_id):
        if stored.stream.startswith("tool/"):
            by_stream.setdefault(stored.stream, []).append(stored)
    closed: list[str] = []
    for stream, events in by_stream.items():
        if events[-1].kind == "tool.completed":
            continue
        decoded = [e.decode() for e in events]
        pending = [e for e in decoded if isinstance(e, ApprovalRequested)]
        resolved = {e.approval_id for e in decoded if isinstance(e, ApprovalResolved)}
        invocation_id = stream.removeprefix("tool/")
        tool = getattr(decoded[0], "tool", "")
        closing: list[ApprovalResolved | ToolCompleted] = []
        for request in pending:
            if request.approval_id not in resolved:
                closing.append(
                    ApprovalResolved(
                        approval_id=request.approval_id,
                        invocation_id=invocation_id,
                        run_id=run_id,
                        decision="deny",
                        decided_by="node",
                        reason="interrupted",
                        tool=request.tool,
                    )
                )
                closed.append(request.approval_id)
        closing.append(
            ToolCompleted(
                invocation_id=invocation_id,
                run_id=run_id,
                tool=tool,
                ok=False,
                error=INTERRUPTED,
                error_kind="interrupted",
            )
        )
        journal.append(
            stream,
            closing,
            expected_seq=events[-1].stream_seq + 1,
            principal="node",
            correlation_id=run_id,
            causation_id=run_id,
        )
    return closed
