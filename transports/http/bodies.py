"""The JSON bodies of the HTTP API: requests (strict) and responses, as msgspec Structs.

Requests forbid unknown fields, so a typo is a 400 naming the field instead of a silently ignored
option. Responses reuse the view records (``projections.records``) as they are, so the API and
the views cannot drift apart; ``/v1/openapi.json`` is generated from these types.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from actors.checkpoints import WorkspaceCheckpoint
from actors.schedules.info import FiredRun as FiredRun  # the CLI prints them too
from actors.schedules.info import ScheduleInfo as ScheduleInfo
from actors.vault.info import SecretInfo as SecretInfo  # the CLI prints them too
from events.catalog import CatchUp, GrantMatch, GrantScope, Overlap, Posture, Verdict
from events.codec import AnyEvent
from projections import ApprovalRecord, RunRecord, SessionRecord
from transports.access.token_info import CreatedToken as CreatedToken  # the CLI prints them too
from transports.access.token_info import TokenInfo as TokenInfo

ULID_PATTERN = "^[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}$"
"""What every id looks like (Crockford base32, 26 characters)."""


class _Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# --- requests ----------------------------------------------------------------------------------


class CreateSessionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions``: a new session, or the existing one with this ``session_key``."""

    session_key: str | None = None
    label: str | None = None


class SendMessageRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/messages``: start a run with ``text``."""

    text: Annotated[str, msgspec.Meta(pattern=r"\S", description="Not blank.")]
    label: str | None = None


class ResetSessionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/reset``: later runs forget earlier history (body optional)."""


class BranchSessionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/branch``: a new session with this one's history up to
    ``run_id`` (default: the last finished run)."""

    run_id: Annotated[str, msgspec.Meta(pattern=ULID_PATTERN)] | None = None
    session_key: str | None = None
    label: str | None = None


class PostureRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/postures``: override one tool's posture for this session only
    (``posture: null`` removes the override)."""

    tool: str
    posture: Posture | None


class CompactSessionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/compact``: condense the older runs now (body optional)."""


class RestoreSessionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/sessions/{id}/restore``: return the session's context to a checkpoint (one
    of ``GET /v1/sessions/{id}/checkpoints``)."""

    checkpoint: Annotated[str, msgspec.Meta(pattern=ULID_PATTERN)]


class RestoreWorkspaceRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/workspace/restore``: put the workspace back to a checkpoint (one of
    ``GET /v1/workspace/checkpoints``): as right after it, or right before it (``before``)."""

    checkpoint: Annotated[str, msgspec.Meta(pattern=ULID_PATTERN)]
    before: bool = False


class WorkspaceCheckpointPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/workspace/checkpoints``: the newest ``limit`` checkpoints, newest first."""

    items: tuple[WorkspaceCheckpoint, ...]
    limit: int
    limit_clamped: bool = False


class CancelRunRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/runs/{id}/cancel`` (body optional)."""


class RevokeGrantRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/grants/revoke``: end the ``always`` grant of ``tool`` to ``principal``."""

    principal: str
    """Whose grant: the principal the approved run acted for."""
    tool: str


class DecisionRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/approvals/{id}``: a human decision on a pending approval."""

    decision: Verdict
    scope: GrantScope = "once"
    reason: str = ""
    match: GrantMatch = "any"
    """With scope ``session``: any arguments, these exact arguments, or a subject prefix."""
    prefix: str = ""
    """With ``match="prefix"``: the argv, path, or method and URL prefix the grant covers."""


class VerifyRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/journal/verify`` (body optional)."""


# --- responses ---------------------------------------------------------------------------------


ErrorCode = Literal[
    "unauthenticated",
    "permission_denied",
    "invalid_argument",
    "not_found",
    "method_not_allowed",
    "conflict",
    "budget_exceeded",
    "payload_too_large",
    "unavailable",
    "internal",
]


class RevokedGrant(msgspec.Struct, frozen=True, kw_only=True):
    """An ``always`` grant revoked (``grant.revoked`` is recorded): the next call asks again."""

    principal: str
    tool: str
    revoked_by: str
    """Who revoked it: the caller's principal."""


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    code: ErrorCode
    """Stable: clients branch on it (the message is for people)."""
    message: str
    field: str | None = None
    """The offending input: ``$.decision`` for a body field, ``query.limit`` for a query
    parameter, ``header.Last-Event-ID`` for a header."""


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorDetail


class SessionPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[SessionRecord]
    limit: int
    """The page size used (after clamping)."""
    limit_clamped: bool
    """True when the requested ``limit`` was above the cap and was lowered to it."""
    next_after: str | None
    """Pass as ``after`` for the next page; null when there is nothing more (now)."""


class RunPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[RunRecord]
    limit: int
    limit_clamped: bool
    next_after: str | None


class ApprovalPage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[ApprovalRecord]
    limit: int
    limit_clamped: bool
    next_after: str | None


class TapeEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A tape entry as the API sends it (:class:`projections.TapeRecord`): ``event`` is the
    event as stored (redacted), one of the catalog's kinds, tagged by ``kind``."""

    run_id: str
    tape_seq: int
    """Dense per run, from 0."""
    position: int
    """The journal position of the event."""
    kind: str
    stream: str
    recorded_at_ms: int
    event: AnyEvent


class TapePage(msgspec.Struct, frozen=True, kw_only=True):
    items: list[TapeEntry]
    limit: int
    limit_clamped: bool
    next_after: int | None
    """The last ``tape_seq`` of this page when more entries exist now; null otherwise (a live
    run's tape may still grow: follow it from the last item's ``tape_seq``, or use SSE)."""


class RunStarted(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/sessions/{id}/messages``: the run is durable and visible in the views."""

    run_id: str
    session_id: str
    session_created: bool
    queued: bool
    """True when an earlier run of the session is still live; this one waits its turn."""


class JournalHead(msgspec.Struct, frozen=True, kw_only=True):
    position: int
    """The last committed journal position (0 when empty)."""
    hash: str
    """That row's chain hash, hex."""
    views_position: int
    """The position every view has applied; ``position - views_position`` is the lag."""


HealthStatus = Literal["ok", "catching_up", "draining"]


class Health(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    status: HealthStatus
    """``catching_up``: serving while the views fold what they lacked at start (views.db was
    behind or missing); reads answer from the views as far as they are."""
    version: str
    """The build serving (:func:`transports.build.version`): ``0.1.0`` or ``0.1.0+g<commit>``."""
    views_position: int | None = None
    """While ``catching_up``: the journal position every view has applied."""
    journal_position: int | None = None
    """While ``catching_up``: the journal's committed head (``journal_position -
    views_position`` events are not in the views yet; ``X-Reel-Views-Behind`` of a read)."""


# --- tokens ------------------------------------------------------------------------------------


class CreateTokenRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/tokens``: a token for ``principal`` with ``roles`` (shown once)."""

    principal: str
    """``user:NAME``, ``service:NAME`` or ``agent:NAME``."""
    roles: list[str]
    """Built-in roles: admin, operator, approver, viewer, agent."""
    expires_in_s: Annotated[int, msgspec.Meta(ge=1, le=10 * 365 * 86400)] | None = None
    note: Annotated[str, msgspec.Meta(max_length=200)] = ""


class TokenList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/tokens``: every token, oldest first."""

    items: list[TokenInfo]


class SetSecretRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/vault``: a new secret ``name`` with ``value`` (docs/vault.md). The value is
    encrypted in the data dir and answered never; the journal records the name only."""

    name: str
    """Letters, digits, ``_ . -``, starting with a letter, at most 64 characters."""
    value: str
    """At least 8 characters, at most 16 KiB."""


class RotateSecretRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/vault/{name}/rotate``: the secret's next value."""

    value: str


class SecretList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/vault``: every secret, by name (never a value)."""

    items: list[SecretInfo]


class CreateScheduleRequest(_Request, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/schedules``: a schedule (docs/schedules.md). Exactly one of ``cron`` and
    ``every``; ``runs_as`` defaults to the caller (scheduling for someone else is Cedar's to
    allow: ``schedule.create`` with ``context.runs_as``)."""

    name: str
    """Letters, digits, ``_ . -``, starting with a letter, at most 64 characters."""
    cron: str | None = None
    """Five fields (minute hour day month weekday), read in ``tz``: ``0 9 * * 1-5``."""
    every: str | None = None
    """An interval: a whole number and a unit of ms, s, m, h, d (``15m``), 1s to 366d."""
    tz: str = "UTC"
    """An IANA time zone (``Europe/Berlin``); the cron line is read in it."""
    session_key: str
    text: str
    runs_as: str | None = None
    catch_up: CatchUp = "one"
    overlap: Overlap = "skip"


class ScheduleList(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/schedules``: every schedule that exists, by name."""

    items: list[ScheduleInfo]
