"""Start-up recovery: resolve from the journal whatever a crash or a stop left in flight.

Before any actor starts, for every run the journal shows accepted but not ended:

* a run waiting for an approval is *resumed* (:mod:`actors.resume`): the approval stays pending
  (or takes effect, if an operator decided it while the node was down) and the run continues;
* every other run fails with reason ``interrupted``: its tool invocations that never completed
  are completed as ``interrupted`` first, so the run's terminal event stays last in its tape.

``always`` grants are reloaded into the gate.
"""

from __future__ import annotations

import msgspec

from actors.gate import ToolGate
from actors.resume import ResumePlan, plan_resume
from events import Journal, JournalReader, StoredEvent
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    GrantRevoked,
    RunFailed,
    ToolCompleted,
)

TERMINAL_KINDS = ("run.completed", "run.failed", "run.cancelled")
INTERRUPTED = "the node stopped while this was in flight"


class RecoveryReport(msgspec.Struct, frozen=True):
    """What recovery resolved, and the runs to resume."""

    interrupted_runs: tuple[str, ...] = ()
    closed_approvals: tuple[str, ...] = ()
    always_grants: int = 0
    resumed: tuple[ResumePlan, ...] = ()


def recover(journal: Journal, gate: ToolGate, system_prompt: str = "") -> RecoveryReport:
    """Resolve in-flight runs, tools and approvals; reload ``always`` grants."""
    accepted = [e.correlation_id for e in journal.events_of_kinds(("run.accepted",))]
    ended = {e.correlation_id for e in journal.events_of_kinds(TERMINAL_KINDS)}
    runs: list[str] = []
    approvals: list[str] = []
    plans: list[ResumePlan] = []
    for run_id in accepted:
        if run_id is None or run_id in ended:
            continue
        events = journal.read_correlated(run_id)
        plan = plan_resume(journal, run_id, events, system_prompt)
        if plan is not None:
            plans.append(plan)
            continue
        approvals.extend(_close_tools(journal, run_id, events))
        stream = f"run/{run_id}"
        journal.append(
            stream,
            [RunFailed(run_id=run_id, reason="interrupted", message=INTERRUPTED)],
            expected_seq=journal.stream_next_seq(stream),
            principal="node",
            correlation_id=run_id,
        )
        runs.append(run_id)
    grants = active_always_grants(journal)
    for principal, tool in grants:
        gate.grant_always(principal, tool)
    return RecoveryReport(tuple(runs), tuple(approvals), len(grants), tuple(plans))


def active_always_grants(reader: JournalReader) -> set[tuple[str, str]]:
    """(principal, tool) pairs granted ``always`` and not revoked since, folded in order."""
    grants: set[tuple[str, str]] = set()
    for stored in reader.events_of_kinds(("tool.approval_resolved", "grant.revoked")):
        event = stored.decode()
        if isinstance(event, GrantRevoked):
            grants.discard((event.principal, event.tool))
        elif (
            isinstance(event, ApprovalResolved)
            and event.decision == "allow"
            and event.scope == "always"
            and event.tool
            and event.grant_principal
        ):
            grants.add((event.grant_principal, event.tool))
    return grants


def _close_tools(journal: Journal, run_id: str, events: list[StoredEvent]) -> list[str]:
    by_stream: dict[str, list[StoredEvent]] = {}
    for stored in events:
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
