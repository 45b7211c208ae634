"""Views records and journal rows as reel.v1 messages (runs, sessions, approvals, envelopes)."""

from __future__ import annotations

import events
from events import StoredEvent, VerifyReport
from projections import ApprovalRecord, RunRecord, SessionRecord
from proto.reel.v1 import (
    Approval,
    ApprovalScope,
    ApprovalState,
    Checkpoint,
    Decision,
    Envelope,
    GrantMatch,
    GrantOption,
    Run,
    RunState,
    Session,
    Usage,
    VerifyFault,
    VerifyJournalResponse,
)
from tools import ToolCatalog
from transports.access.grants import presented
from transports.grpc.tape import DECISIONS, MATCHES, SCOPES, STATES, to_json

APPROVAL_STATES: dict[str, ApprovalState] = {
    "pending": ApprovalState.PENDING,
    "resolved": ApprovalState.RESOLVED,
}


def run_message(run: RunRecord, last_tape_seq: int) -> Run:
    return Run(
        run_id=run.run_id,
        session_id=run.session_id,
        principal=run.principal,
        state=STATES.get(run.state, RunState.UNSPECIFIED),
        termination_reason=run.termination_reason or "",
        message=run.message or "",
        accepted_at_ms=run.accepted_at_ms,
        started_at_ms=run.started_at_ms or 0,
        ended_at_ms=run.ended_at_ms or 0,
        usage=Usage(
            turns=run.turns,
            tool_calls=run.tool_calls,
            prompt_tokens=run.prompt_tokens,
            completion_tokens=run.completion_tokens,
        ),
        answer=run.answer or "",
        last_tape_seq=last_tape_seq,
    )


def session_message(session: SessionRecord) -> Session:
    return Session(
        session_id=session.session_id,
        session_key=session.session_key or "",
        label=session.label or "",
        parent_session_id=session.parent_session_id or "",
        branched_from_run_id=session.branched_from_run_id or "",
        principal=session.principal,
        created_at_ms=session.created_at_ms,
        updated_at_ms=session.updated_at_ms,
        runs=session.runs,
        resets=session.resets,
        last_run_id=session.last_run_id or "",
    )


def approval_message(record: ApprovalRecord, catalog: ToolCatalog) -> Approval:
    """The approval with what it grants (``covers``) or could grant (``options``)."""
    approval = presented(record, catalog)
    return Approval(
        match=MATCHES.get(approval.match or "", GrantMatch.UNSPECIFIED),
        prefix=approval.prefix or "",
        covers=approval.covers,
        options=[
            GrantOption(
                scope=SCOPES.get(o.scope, ApprovalScope.UNSPECIFIED),
                match=MATCHES.get(o.match, GrantMatch.UNSPECIFIED),
                covers=o.covers,
            )
            for o in approval.options
        ],
        approval_id=approval.approval_id,
        invocation_id=approval.invocation_id,
        run_id=approval.run_id,
        session_id=approval.session_id,
        tool=approval.tool,
        arguments_json=to_json(approval.arguments),
        risk=approval.risk,
        reason=approval.reason,
        principal=approval.principal,
        requested_at_ms=approval.requested_at_ms,
        expires_at_ms=approval.expires_at_ms,
        state=APPROVAL_STATES.get(approval.state, ApprovalState.UNSPECIFIED),
        decision=DECISIONS.get(approval.decision or "", Decision.UNSPECIFIED),
        scope=SCOPES.get(approval.scope or "", ApprovalScope.UNSPECIFIED),
        decided_by=approval.decided_by or "",
        decided_reason=approval.decided_reason or "",
        resolved_at_ms=approval.resolved_at_ms or 0,
        waited_ms=approval.waited_ms or 0,
    )


def envelope_message(stored: StoredEvent) -> Envelope:
    """A journal row exactly as stored: absent ids stay absent (the hash tells them apart)."""
    return Envelope(
        position=stored.position,
        event_id=stored.event_id,
        stream=stored.stream,
        stream_seq=stored.stream_seq,
        kind=stored.kind,
        version=stored.version,
        recorded_at_ms=stored.recorded_at_ms,
        principal=stored.principal,
        correlation_id=stored.correlation_id,
        causation_id=stored.causation_id,
        payload=stored.payload,
        prev_hash=stored.prev_hash,
        hash=stored.hash,
    )


def checkpoint_message(checkpoint: events.Checkpoint) -> Checkpoint:
    return Checkpoint(
        position=checkpoint.position,
        hash=checkpoint.hash,
        signed_at_ms=checkpoint.signed_at_ms,
        public_key=checkpoint.public_key,
        signature=checkpoint.signature,
    )


def verify_message(report: VerifyReport) -> VerifyJournalResponse:
    fault = report.fault
    return VerifyJournalResponse(
        ok=report.ok,
        events=report.events,
        head_position=report.head_position,
        head_hash=report.head_hash,
        checkpoints=report.checkpoints,
        last_checkpoint_position=report.last_checkpoint_position,
        key_trusted=report.key_trusted,
        elapsed_s=report.elapsed_s,
        fault=None
        if fault is None
        else VerifyFault(
            kind=fault.kind,
            position=fault.position,
            message=fault.message,
            checkpoint_position=fault.checkpoint_position or 0,
            earliest_position=fault.earliest_position or 0,
        ),
    )
