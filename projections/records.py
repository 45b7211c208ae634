"""The rows of the views, as typed records (the HTTP API returns them; its OpenAPI schema is
generated from them)."""

from __future__ import annotations

from typing import Any

import msgspec

from events import Event


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    session_key: str | None
    label: str | None
    parent_session_id: str | None
    branched_from_run_id: str | None
    principal: str
    created_at_ms: int
    updated_at_ms: int
    runs: int
    resets: int
    last_run_id: str | None


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    session_id: str
    principal: str
    state: str
    """accepted, in_progress, awaiting_approval, done, failed or cancelled."""
    termination_reason: str | None
    message: str | None
    accepted_at_ms: int
    started_at_ms: int | None
    ended_at_ms: int | None
    turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    answer: str | None


def session_text(session: SessionRecord) -> tuple[str | None, ...]:
    """What a search of sessions looks in (``GET /v1/sessions?q=``, ``reel sessions list
    --search``): the id, the key, the label and the owner."""
    return (session.session_id, session.session_key, session.label, session.principal)


def run_text(run: RunRecord) -> tuple[str | None, ...]:
    """What a search of runs looks in (``GET /v1/runs?q=``, ``reel runs list --search``): the
    ids, who the run acts for, how it ended, its message and its answer."""
    return (
        run.run_id,
        run.session_id,
        run.principal,
        run.termination_reason,
        run.message,
        run.answer,
    )


class TapeRecord(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    tape_seq: int
    """Dense per run, from 0."""
    position: int
    """The journal position of the event."""
    kind: str
    stream: str
    recorded_at_ms: int
    event: Event
    """The event as stored (redacted), decoded to its catalog class (a typed Struct: a renamed
    field breaks the transports' type check, not their clients)."""


class RawTapeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A :class:`TapeRecord` whose ``event`` is the stored JSON, passed on without decoding
    (what streams and pages send: decoding and re-encoding was most of their cost)."""

    run_id: str
    tape_seq: int
    position: int
    kind: str
    stream: str
    recorded_at_ms: int
    event: msgspec.Raw


class ApprovalRecord(msgspec.Struct, frozen=True, kw_only=True):
    approval_id: str
    invocation_id: str
    run_id: str
    session_id: str
    tool: str
    arguments: Any
    risk: str
    reason: str
    principal: str
    requested_at_ms: int
    expires_at_ms: int
    state: str
    """pending or resolved."""
    decision: str | None
    scope: str | None
    decided_by: str | None
    decided_reason: str | None
    resolved_at_ms: int | None
    waited_ms: int | None
    match: str | None = None
    """For an allow with scope session: ``any``, ``exact`` or ``prefix``
    (actors/approvals/grants.py)."""
    prefix: str | None = None
    """For ``match="prefix"``: the prefix the approver typed."""
    covers: str = ""
    """What the decision grants, as a sentence (filled in by the transports; "" while
    pending)."""
    options: tuple[GrantOption, ...] = ()
    """While pending: the choices the approver has, each with what it would grant (filled in
    by the transports, which know the node's tools)."""
    subject: str = "tool"
    """What is to be approved: ``tool`` (a tool call of a run) or ``pairing`` (a chat sender
    asks to be paired with a channel: ``principal`` is the sender, ``arguments`` name the
    channel and conversation, and ``run_id``, ``session_id``, ``invocation_id`` and ``tool``
    are empty)."""


class GrantOption(msgspec.Struct, frozen=True, kw_only=True):
    """One choice offered to an approver, with what it grants."""

    scope: str
    match: str
    covers: str


class ToolUsageRecord(msgspec.Struct, frozen=True, kw_only=True):
    tool: str
    proposed: int
    allowed: int
    denied: int
    approval_required: int
    succeeded: int
    failed: int
    total_duration_ms: int
