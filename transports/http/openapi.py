"""``GET /v1/openapi.json``: the API described as OpenAPI 3.1, schemas generated from the Structs.

The paths are written here; the rest is derived, so a route added to them needs nothing more:
the component schemas are ``msgspec.json.schema_components`` of exactly the types the paths
reference (the same types the handlers decode and encode, so the document cannot drift from the
code), each titled with its name and its ``Literal`` fields named; each operation's
``operationId`` is its handler's name and its tag its path's first segment. A test validates
real responses of every route against this document, schemathesis fuzzes a live node with it,
and the generators people use must accept it (``tests/transports/http/test_http_generators.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import msgspec
from aiohttp import web

from actors.channels.message import MessageBody
from actors.checkpoints import WorkspaceCheckpoint, WorkspaceDiff
from actors.messages import CompactionOutcome
from actors.sessions.compaction import Checkpoints
from events import VerifyReport
from projections import (
    ApprovalRecord,
    CandidateRecord,
    MemoryItem,
    RunRecord,
    SessionRecord,
    TaskRecord,
)
from projections.usage import GROUPINGS, UsageReport
from tools.mcp.config import SERVER_NAME
from transports.build import version
from transports.channels import MintedCode, RouteResult
from transports.http.bodies import (
    ULID_PATTERN,
    ApprovalPage,
    BranchSessionRequest,
    CancelRunRequest,
    CompactSessionRequest,
    CreatedToken,
    CreateScheduleRequest,
    CreateSessionRequest,
    CreateTokenRequest,
    DecisionRequest,
    ErrorBody,
    FiredRun,
    Health,
    JournalHead,
    PostureRequest,
    ResetSessionRequest,
    RestoreSessionRequest,
    RestoreWorkspaceRequest,
    RevokedGrant,
    RevokeGrantRequest,
    RotateSecretRequest,
    RunPage,
    RunStarted,
    ScheduleInfo,
    ScheduleList,
    SecretInfo,
    SecretList,
    SendMessageRequest,
    SessionPage,
    SetSecretRequest,
    TapeEntry,
    TapePage,
    TokenInfo,
    TokenList,
    VerifyRequest,
    WorkspaceCheckpointPage,
)
from transports.http.channels import ChannelList, PairCodeRequest
from transports.http.context import permit
from transports.http.incidents import INCIDENT_FILTERS, IncidentPage
from transports.http.inputs import (
    APPROVAL_FILTERS,
    LIST_CAP,
    MAX_SEQ,
    ORDERS,
    RUN_FILTERS,
    SEARCH_MAX_CHARS,
    SESSION_FILTERS,
    TAPE_CAP,
    QueryFilter,
)
from transports.http.journal import CheckpointPage
from transports.http.learning import CANDIDATE_FILTERS, CandidatePage, ReviewRequest
from transports.http.memory import (
    K_MAX,
    QUERY_MAX_CHARS,
    MemoryDeleted,
    MemoryPage,
    MemorySearch,
    MemoryWriteRequest,
    MemoryWritten,
)
from transports.http.postures import SessionPostures
from transports.http.providers import EndpointList, ProbeList
from transports.http.routes import ROUTES
from transports.http.tasks import TASK_FILTERS, CancelTaskRequest, TaskPage
from transports.http.whoami import Whoami
from transports.mcp_servers import McpServerRow, McpServers

REF = "#/components/schemas/{name}"

_DAY = {"type": "string", "format": "date"}
USAGE_PARAMETERS: tuple[dict[str, Any], ...] = (
    {
        "name": "by",
        "in": "query",
        "required": False,
        "description": "Group by principal (the default), session or model.",
        "schema": {"type": "string", "enum": list(GROUPINGS), "default": "principal"},
    },
    {
        "name": "from",
        "in": "query",
        "required": False,
        "description": "First UTC day, YYYY-MM-DD (default: today).",
        "schema": _DAY,
    },
    {
        "name": "to",
        "in": "query",
        "required": False,
        "description": "Last UTC day, inclusive (default: today).",
        "schema": _DAY,
    },
)

ERRORS = {
    400: "Bad input: malformed JSON, a wrong type, an unknown field or a bad parameter "
    "(``field`` names it).",
    401: "Missing, unknown, expired or revoked bearer token (one message for each).",
    403: "The principal may not do this: Cedar denied the action (the message names it and "
    "the deciding policies).",
    404: "No such session, run or approval.",
    409: "The current state refuses the command (already resolved, run ended, key taken).",
    429: "A hard usage budget refuses the run (code ``budget_exceeded``; the message names the "
    "budget; docs/usage.md).",
    413: "The request body is over ``http.max_body_bytes`` (refused on any route before it "
    "is read).",
    503: "The node is shutting down.",
}

SSE_EVENT = {
    "type": "object",
    "description": "One event of the stream (OpenAPI 3.1: the schema describes each event).",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The tape_seq."},
        "event": {"type": "string", "description": "The entry's kind."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": TapeEntry},
        },
        "retry": {"type": "integer"},
    },
}

routes = web.RouteTableDef()


def _ref(kind: type[Any]) -> dict[str, Any]:
    """A reference to ``kind``'s component schema: the type itself stands in the ``$ref`` until
    :func:`_with_components` names it, so only types a path uses become components, and every
    path's reference has one."""
    return {"$ref": kind}


def _json(kind: type[Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": _ref(kind)}}}


def _id(name: str, what: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": f"The {what}'s id (a ULID).",
        "schema": {"type": "string", "pattern": ULID_PATTERN},
    }


def _limit(cap: int) -> dict[str, Any]:
    return {
        "name": "limit",
        "in": "query",
        "required": False,
        "description": f"Page size, default 50; above {cap} it is lowered to {cap} "
        "(the response says ``limit_clamped``).",
        "schema": {"type": "integer", "minimum": 1, "maximum": MAX_SEQ},
    }


def _filters(filters: tuple[QueryFilter, ...]) -> tuple[dict[str, Any], ...]:
    """A list's filters (:mod:`transports.http.inputs` declares them) as query parameters."""
    return tuple(
        {
            "name": f.name,
            "in": "query",
            "required": False,
            "description": f"{f.description} Absent: any.",
            "schema": dict(f.schema),
        }
        for f in filters
    )


CHANNEL = {
    "name": "channel",
    "in": "path",
    "required": True,
    "description": "A configured channel's name ([channels.<name>]).",
    "schema": {"type": "string", "pattern": "^[a-z][a-z0-9_.-]{0,31}$"},
}
MCP_SERVER = {
    "name": "server",
    "in": "path",
    "required": True,
    "description": "A configured MCP server's name ([mcp.servers.<name>]).",
    "schema": {"type": "string", "pattern": SERVER_NAME},
}
AFTER_ID = {
    "name": "after",
    "in": "query",
    "required": False,
    "description": "The ``next_after`` of the previous page.",
    "schema": {"type": "string", "pattern": ULID_PATTERN},
}
ORDER = {
    "name": "order",
    "in": "query",
    "required": False,
    "description": "``oldest`` first (the default) or ``newest`` first; with ``newest``, "
    "``after`` pages on to older items.",
    "schema": {"enum": list(ORDERS)},
}
SEARCH = {
    "name": "q",
    "in": "query",
    "required": False,
    "description": "Only items whose text contains this (case-insensitive): see docs/http-api.md "
    "for the fields searched and how a searched page is read.",
    "schema": {"type": "string", "minLength": 1, "maxLength": SEARCH_MAX_CHARS, "pattern": "\\S"},
}
AFTER_SEQ = {
    "name": "after",
    "in": "query",
    "required": False,
    "description": "Entries with ``tape_seq`` greater than this (default -1: from the start).",
    "schema": {"type": "integer", "minimum": -1, "maximum": MAX_SEQ},
}


def _op(
    summary: str,
    ok: dict[int, dict[str, Any]],
    errors: tuple[int, ...],
    *,
    parameters: tuple[dict[str, Any], ...] = (),
    body: type[Any] | None = None,
    body_required: bool = False,
    public: bool = False,
) -> dict[str, Any]:
    responses: dict[str, Any] = {str(status): spec for status, spec in ok.items()}
    # any request may declare a body over the limit (413); an authenticated operation may
    # also refuse a query parameter it does not take (400), the token (401) or the action (403)
    codes = {413, *errors} if public else {400, 401, 403, 413, *errors}
    for status in sorted(codes):
        responses[str(status)] = _json(ErrorBody, ERRORS[status])
    op: dict[str, Any] = {"summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = list(parameters)
    if body is not None:
        op["requestBody"] = {
            "required": body_required,
            "content": {"application/json": {"schema": _ref(body)}},
        }
    if public:
        op["security"] = []
    return op


_SCHEDULE_NAME: dict[str, Any] = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The schedule's name (letters, digits, _ . -; starting with a letter).",
    "schema": {"type": "string"},
}

_SECRET_NAME: dict[str, Any] = {
    "name": "name",
    "in": "path",
    "required": True,
    "description": "The secret's name (letters, digits, _ . -; starting with a letter).",
    "schema": {"type": "string"},
}


def _paths() -> dict[str, Any]:
    session = _id("session_id", "session")
    run = _id("run_id", "run")
    approval = _id("approval_id", "approval")
    write = (400, 404, 409, 413, 503)
    return {
        "/v1/sessions": {
            "get": _op(
                "Sessions in creation order (or newest first), narrowed by the filters and q; "
                "only those the caller may read (session.read).",
                {200: _json(SessionPage, "A page of sessions.")},
                (400,),
                parameters=(*_filters(SESSION_FILTERS), SEARCH, ORDER, AFTER_ID, _limit(LIST_CAP)),
            ),
            "post": _op(
                "Create a session (or return the one with this session_key).",
                {
                    201: _json(SessionRecord, "Created."),
                    200: _json(SessionRecord, "A session with this key already exists."),
                },
                (400, 409, 413, 503),
                body=CreateSessionRequest,
            ),
        },
        "/v1/sessions/{session_id}": {
            "get": _op(
                "One session.",
                {200: _json(SessionRecord, "The session.")},
                (404,),
                parameters=(session,),
            )
        },
        "/v1/sessions/{session_id}/runs": {
            "get": _op(
                "A session's runs in order.",
                {200: _json(RunPage, "A page of runs.")},
                (400, 404),
                parameters=(session, AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/sessions/{session_id}/messages": {
            "post": _op(
                "Send a message: starts a run (returns its id at once); a 429 when a hard "
                "usage budget refuses it (budget.refused is recorded).",
                {202: _json(RunStarted, "The run is accepted and durable.")},
                (*write, 429),
                parameters=(session,),
                body=SendMessageRequest,
                body_required=True,
            )
        },
        "/v1/sessions/{session_id}/reset": {
            "post": _op(
                "Reset: later runs no longer see earlier history; session grants are dropped.",
                {200: _json(SessionRecord, "The session after the reset.")},
                write,
                parameters=(session,),
                body=ResetSessionRequest,
            )
        },
        "/v1/sessions/{session_id}/branch": {
            "post": _op(
                "Branch: a new session with this one's history up to a run.",
                {201: _json(SessionRecord, "The new session.")},
                write,
                parameters=(session,),
                body=BranchSessionRequest,
            )
        },
        "/v1/sessions/{session_id}/postures": {
            "get": _op(
                "Every tool of the node with its posture in this session: the node's, the "
                "session's override (who set it, when) and the one in force. session.read, "
                "then tool.list.",
                {200: _json(SessionPostures, "The tools by name.")},
                (404,),
                parameters=(session,),
            ),
            "post": _op(
                "Override one tool's posture for this session only (null removes it).",
                {200: _json(SessionRecord, "The session.")},
                write,
                parameters=(session,),
                body=PostureRequest,
                body_required=True,
            ),
        },
        "/v1/sessions/{session_id}/compact": {
            "post": _op(
                "Compact: condense the session's older runs into a summary now "
                "(docs/context.md). session.compact. 409 while a run of the session is live or "
                "queued, or when no completed run is left to condense.",
                {
                    200: _json(CompactionOutcome, "Compacted (status compacted)."),
                    202: _json(
                        CompactionOutcome,
                        "Decided; the session's model is writing the summary (status writing): "
                        "the checkpoint appears in /checkpoints when it is recorded.",
                    ),
                },
                write,
                parameters=(session,),
                body=CompactSessionRequest,
            )
        },
        "/v1/sessions/{session_id}/checkpoints": {
            "get": _op(
                "The session's checkpoints (one per compaction), oldest first, and the one in "
                "force. session.read.",
                {200: _json(Checkpoints, "The checkpoints.")},
                (404,),
                parameters=(session,),
            )
        },
        "/v1/sessions/{session_id}/restore": {
            "post": _op(
                "Restore: the session's context returns to a checkpoint (its summary and "
                "history); later runs stay in the journal. session.restore. An unknown "
                "checkpoint is a 400 naming $.checkpoint; 409 while a run is live or queued.",
                {200: _json(Checkpoints, "The checkpoints, the restored one in force.")},
                write,
                parameters=(session,),
                body=RestoreSessionRequest,
                body_required=True,
            )
        },
        "/v1/workspace/checkpoints": {
            "get": _op(
                "The workspace's checkpoints (one per call or restore that changed files), "
                "newest first: each file's path and SHA-256 before and after. workspace.read.",
                {200: _json(WorkspaceCheckpointPage, "The newest checkpoints.")},
                (),
                parameters=(_limit(LIST_CAP),),
            )
        },
        "/v1/workspace/diff": {
            "get": _op(
                "What changed in the workspace since a checkpoint: each file's hash then and "
                "now, with a unified diff when both versions are kept text. workspace.read. "
                "An unknown checkpoint is a 404.",
                {200: _json(WorkspaceDiff, "The files changed since the checkpoint.")},
                (404, 503),
                parameters=(
                    {
                        "name": "since",
                        "in": "query",
                        "required": True,
                        "description": "A checkpoint id.",
                        "schema": {"type": "string", "pattern": ULID_PATTERN},
                    },
                ),
            )
        },
        "/v1/workspace/restore": {
            "post": _op(
                "Restore the workspace to a checkpoint (as right after it, or right before it "
                "with before): itself recorded as a checkpoint, so it can be restored in turn. "
                "workspace.restore. An unknown checkpoint is a 404; a version no longer kept "
                "(pruned or deleted) a 409 naming the file, with nothing written.",
                {200: _json(WorkspaceCheckpoint, "The checkpoint the restore recorded.")},
                write,
                body=RestoreWorkspaceRequest,
                body_required=True,
            )
        },
        "/v1/runs": {
            "get": _op(
                "Runs in acceptance order (or newest first), narrowed by the filters and q; only "
                "those the caller may read (run.read).",
                {200: _json(RunPage, "A page of runs.")},
                (400,),
                parameters=(*_filters(RUN_FILTERS), SEARCH, ORDER, AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/runs/{run_id}": {
            "get": _op("One run.", {200: _json(RunRecord, "The run.")}, (404,), parameters=(run,))
        },
        "/v1/runs/{run_id}/tape": {
            "get": _op(
                "A run's tape, page by page.",
                {200: _json(TapePage, "A page of tape entries.")},
                (400, 404),
                parameters=(run, AFTER_SEQ, _limit(TAPE_CAP)),
            )
        },
        "/v1/runs/{run_id}/events": {
            "get": _op(
                "A run's tape as Server-Sent Events: the backlog after Last-Event-ID (or "
                "after), then live entries; ends after the terminal entry.",
                {
                    200: {
                        "description": "``id:`` tape_seq, ``event:`` kind, ``data:`` TapeEntry "
                        "JSON; ``: keep-alive`` comments in between.",
                        "content": {"text/event-stream": {"schema": SSE_EVENT}},
                    }
                },
                (400, 404, 503),
                parameters=(
                    run,
                    AFTER_SEQ,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "description": "Resume after this tape_seq (wins over ``after``).",
                        "schema": {"type": "integer", "minimum": -1, "maximum": MAX_SEQ},
                    },
                ),
            )
        },
        "/v1/runs/{run_id}/cancel": {
            "post": _op(
                "Cancel a queued or live run.",
                {202: _json(RunRecord, "Cancellation requested; the run as it is now.")},
                write,
                parameters=(run,),
                body=CancelRunRequest,
            )
        },
        "/v1/approvals": {
            "get": _op(
                "Approvals in request order, narrowed by the filters (each an exact match; "
                "together: all must match); only those the caller may read (approval.read).",
                {200: _json(ApprovalPage, "A page of approvals.")},
                (400,),
                parameters=(*_filters(APPROVAL_FILTERS), AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/approvals/{approval_id}": {
            "get": _op(
                "One approval.",
                {200: _json(ApprovalRecord, "The approval.")},
                (404,),
                parameters=(approval,),
            ),
            "post": _op(
                "Decide a pending approval (a second decision is a 409).",
                {200: _json(ApprovalRecord, "The approval, resolved.")},
                write,
                parameters=(approval,),
                body=DecisionRequest,
                body_required=True,
            ),
        },
        "/v1/grants/revoke": {
            "post": _op(
                "Revoke an always grant (grant.revoke): grant.revoked is recorded, then the "
                "node asks again for the principal's next call of the tool; a 409 when the "
                "principal holds no such grant.",
                {200: _json(RevokedGrant, "The grant, revoked.")},
                (400, 409, 413, 503),
                body=RevokeGrantRequest,
                body_required=True,
            )
        },
        "/v1/incidents": {
            "get": _op(
                "What the watchdog found, in opening order, narrowed by the filters (each an "
                "exact match); incident.read (docs/operations.md, Watchdog).",
                {200: _json(IncidentPage, "A page of incidents.")},
                (400,),
                parameters=(*_filters(INCIDENT_FILTERS), AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/usage": {
            "get": _op(
                "Tokens, runs and cost by principal, session or model over UTC days "
                "(docs/usage.md); usage.read: the caller's own, and each other principal's "
                "only where Cedar permits it.",
                {200: _json(UsageReport, "The usage, one row per group, and the total.")},
                (400,),
                parameters=USAGE_PARAMETERS,
            )
        },
        "/v1/journal/head": {
            "get": _op("The head of the hash chain.", {200: _json(JournalHead, "The head.")}, ())
        },
        "/v1/journal/checkpoints": {
            "get": _op(
                "The signed checkpoints, oldest first, each with its C2SP signed note: what a "
                "monitor pulls to keep a witness of its own (docs/journal-format.md section 7).",
                {200: _json(CheckpointPage, "A page of checkpoints.")},
                (400,),
                parameters=(
                    {
                        "name": "after",
                        "in": "query",
                        "required": False,
                        "description": "Checkpoints whose ``position`` is greater than this "
                        "(default -1: from the first).",
                        "schema": {"type": "integer", "minimum": -1, "maximum": MAX_SEQ},
                    },
                    _limit(LIST_CAP),
                ),
            )
        },
        "/v1/journal/verify": {
            "post": _op(
                "Verify the whole chain and its signed checkpoints (a fault is reported in "
                "the body, with a 200).",
                {200: _json(VerifyReport, "The verification report.")},
                (400, 413),
                body=VerifyRequest,
            )
        },
        "/v1/tokens": {
            "get": _op(
                "Every API token, oldest first (never the token itself). token.manage.",
                {200: _json(TokenList, "The tokens.")},
                (),
            ),
            "post": _op(
                "Create a token for a principal with roles; the token is in this answer once. "
                "token.manage.",
                {201: _json(CreatedToken, "Created: store the token now.")},
                (413, 503),
                body=CreateTokenRequest,
                body_required=True,
            ),
        },
        "/v1/tokens/{token_id}": {
            "delete": _op(
                "Revoke a token: refused from the next request on. token.manage.",
                {200: _json(TokenInfo, "Revoked.")},
                (404, 409, 503),
                parameters=(
                    {
                        "name": "token_id",
                        "in": "path",
                        "required": True,
                        "description": "The token's id (a ULID).",
                        "schema": {"type": "string"},
                    },
                    {
                        "name": "reason",
                        "in": "query",
                        "required": False,
                        "description": "Why (recorded with the revocation; at most 1,000 "
                        "characters).",
                        "schema": {"type": "string", "minLength": 1, "maxLength": 1000},
                    },
                ),
            )
        },
        "/v1/vault": {
            "get": _op(
                "Every secret of the vault, by name (never a value). vault.list.",
                {200: _json(SecretList, "The secrets.")},
                (),
            ),
            "post": _op(
                "Set a new secret (its value encrypted in the data dir, answered never). "
                "vault.manage.",
                {201: _json(SecretInfo, "Set.")},
                (409, 413, 503),
                body=SetSecretRequest,
                body_required=True,
            ),
        },
        "/v1/vault/{name}/rotate": {
            "post": _op(
                "Give a secret its next value: the next tool call uses it, and the old one "
                "stays redacted. vault.manage.",
                {200: _json(SecretInfo, "Rotated.")},
                (404, 413, 503),
                parameters=(_SECRET_NAME,),
                body=RotateSecretRequest,
                body_required=True,
            )
        },
        "/v1/vault/{name}": {
            "delete": _op(
                "Delete a secret and erase its values: a handle naming it fails. vault.manage.",
                {200: _json(SecretInfo, "Deleted.")},
                (404, 503),
                parameters=(_SECRET_NAME,),
            )
        },
        "/v1/schedules": {
            "get": _op(
                "Every schedule that exists, by name, with its next due time. schedule.list.",
                {200: _json(ScheduleList, "The schedules.")},
                (),
            ),
            "post": _op(
                "Create a schedule: a cron line in a time zone or an interval; its runs start "
                "in session_key as runs_as (default the caller), who must hold a live token. "
                "schedule.create.",
                {201: _json(ScheduleInfo, "Created.")},
                (409, 503),
                body=CreateScheduleRequest,
                body_required=True,
            ),
        },
        "/v1/schedules/{name}/pause": {
            "post": _op(
                "Pause a schedule: its due times pass without a run. schedule.manage.",
                {200: _json(ScheduleInfo, "Paused.")},
                (404, 409, 503),
                parameters=(_SCHEDULE_NAME,),
            )
        },
        "/v1/schedules/{name}/resume": {
            "post": _op(
                "Resume a paused schedule from its next due time (no catch-up of the pause). "
                "schedule.manage.",
                {200: _json(ScheduleInfo, "Resumed.")},
                (404, 409, 503),
                parameters=(_SCHEDULE_NAME,),
            )
        },
        "/v1/schedules/{name}/run": {
            "post": _op(
                "Fire a schedule now (paused or not): its run id is recorded before the run "
                "is asked for. schedule.manage.",
                {202: _json(FiredRun, "Fired: the run starts or waits in its session.")},
                (404, 409, 503),
                parameters=(_SCHEDULE_NAME,),
            )
        },
        "/v1/schedules/{name}": {
            "delete": _op(
                "Delete a schedule: it fires nothing more and its name is free. schedule.manage.",
                {200: _json(ScheduleInfo, "Deleted.")},
                (404, 503),
                parameters=(_SCHEDULE_NAME,),
            )
        },
        "/v1/memory": {
            "post": _op(
                "Write a memory item (memory.write): text at most 8,000 characters, at most 16 "
                "tags; scope principal (the caller's, the default), session (with session_id) "
                "or global; expires_at in the future.",
                {201: _json(MemoryWritten, "Written: the item's id and the item.")},
                (404, 413, 503),
                body=MemoryWriteRequest,
                body_required=True,
            ),
            "get": _op(
                "With q: the best items for the query that the caller may read (global, its "
                "own, and session_id's), each with its scores (memory.list, then memory.read "
                "per item). Without q: every item the caller may read, paged, in write order.",
                {
                    200: {
                        "description": "Hits (a search) or a page of items (a list).",
                        "content": {
                            "application/json": {
                                "schema": {"anyOf": [_ref(MemorySearch), _ref(MemoryPage)]}
                            }
                        },
                    }
                },
                (400, 404),
                parameters=(
                    {
                        "name": "q",
                        "in": "query",
                        "required": False,
                        "description": "Search for these words (any syntax is plain text).",
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": QUERY_MAX_CHARS,
                            "pattern": "\\S",
                        },
                    },
                    {
                        "name": "k",
                        "in": "query",
                        "required": False,
                        "description": "With q: how many hits at most (default 5).",
                        "schema": {"type": "integer", "minimum": 1, "maximum": K_MAX},
                    },
                    {
                        "name": "session_id",
                        "in": "query",
                        "required": False,
                        "description": "With q: also search this session's items (a session "
                        "the caller may read).",
                        "schema": {"type": "string", "pattern": ULID_PATTERN},
                    },
                    AFTER_ID,
                    _limit(LIST_CAP),
                ),
            ),
        },
        "/v1/memory/{item_id}": {
            "get": _op(
                "One memory item the caller may read (memory.read); expired and deleted "
                "items are not found.",
                {200: _json(MemoryItem, "The item.")},
                (404,),
                parameters=(_id("item_id", "memory item"),),
            ),
            "delete": _op(
                "Delete a memory item (memory.delete): every view forgets it; its written "
                "event stays in the journal.",
                {200: _json(MemoryDeleted, "Deleted.")},
                (404, 409, 503),
                parameters=(
                    _id("item_id", "memory item"),
                    {
                        "name": "reason",
                        "in": "query",
                        "required": False,
                        "description": "Why (recorded with the deletion; at most 1,000 "
                        "characters).",
                        "schema": {"type": "string", "maxLength": 1000},
                    },
                ),
            ),
        },
        "/v1/tasks": {
            "get": _op(
                "Background tasks in enqueue order, narrowed by the filters (each an exact "
                "match; together: all must match); only those the caller may read (task.read).",
                {200: _json(TaskPage, "A page of tasks.")},
                (400,),
                parameters=(*_filters(TASK_FILTERS), ORDER, AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/tasks/{task_id}": {
            "get": _op(
                "One background task (task.read).",
                {200: _json(TaskRecord, "The task.")},
                (404,),
                parameters=(_id("task_id", "task"),),
            )
        },
        "/v1/tasks/{task_id}/cancel": {
            "post": _op(
                "Cancel a task that has not ended (task.cancel): task.cancelled is recorded "
                "and a running handler is told to stop; a task that ended is a 409.",
                {200: _json(TaskRecord, "The task, cancelled.")},
                (400, 404, 409, 413, 503),
                parameters=(_id("task_id", "task"),),
                body=CancelTaskRequest,
            )
        },
        "/v1/learning/candidates": {
            "get": _op(
                "Learning candidates in the order reflection proposed them, narrowed by the "
                "filters (each an exact match; together: all must match); learning.list, then "
                "only those the caller may read (learning.read). docs/learning.md.",
                {200: _json(CandidatePage, "A page of candidates.")},
                (400,),
                parameters=(*_filters(CANDIDATE_FILTERS), AFTER_ID, _limit(LIST_CAP)),
            )
        },
        "/v1/learning/candidates/{candidate_id}": {
            "get": _op(
                "One learning candidate with its evidence (learning.read).",
                {200: _json(CandidateRecord, "The candidate.")},
                (404,),
                parameters=(_id("candidate_id", "learning candidate"),),
            )
        },
        "/v1/learning/candidates/{candidate_id}/accept": {
            "post": _op(
                "Apply the candidate (a fact becomes a memory item; a preference or procedure "
                "is offered to later runs). learning.review. 409 for an applied candidate.",
                {200: _json(CandidateRecord, "The candidate after the review.")},
                (400, 404, 409, 413, 503),
                parameters=(_id("candidate_id", "learning candidate"),),
                body=ReviewRequest,
            )
        },
        "/v1/learning/candidates/{candidate_id}/reject": {
            "post": _op(
                "Refuse a pending candidate. learning.review. 409 for a candidate that is not "
                "pending (roll an applied one back instead).",
                {200: _json(CandidateRecord, "The candidate after the review.")},
                (400, 404, 409, 413, 503),
                parameters=(_id("candidate_id", "learning candidate"),),
                body=ReviewRequest,
            )
        },
        "/v1/learning/candidates/{candidate_id}/rollback": {
            "post": _op(
                "Withdraw an applied candidate (its memory item is deleted; a preference or "
                "procedure is no longer offered). learning.review. 409 for a candidate that is "
                "not applied.",
                {200: _json(CandidateRecord, "The candidate after the review.")},
                (400, 404, 409, 413, 503),
                parameters=(_id("candidate_id", "learning candidate"),),
                body=ReviewRequest,
            )
        },
        "/v1/mcp/servers": {
            "get": _op(
                "The configured MCP servers: state, why one failed, and every tool each "
                "announced or config names, allowed or not, with its posture (docs/mcp.md). "
                "tool.list.",
                {200: _json(McpServers, "The servers by name.")},
                (),
            )
        },
        "/v1/mcp/servers/{server}/test": {
            "post": _op(
                "Start the server if it is not running (a failed one at once) and read its "
                "tool list again; the server after. mcp.test.",
                {200: _json(McpServerRow, "The server.")},
                (404,),
                parameters=(MCP_SERVER,),
            )
        },
        "/v1/providers": {
            "get": _op(
                "The model endpoints ([[providers]], or [provider]'s one): kind, model, circuit "
                "state, consecutive failures, attempts since start (docs/providers.md). "
                "node.read.",
                {200: _json(EndpointList, "The endpoints, in failover order.")},
                (),
            )
        },
        "/v1/providers/test": {
            "post": _op(
                "One tiny request to each endpoint (no retry, no failover, circuits untouched): "
                "its latency and the model that answered, or the error. provider.test.",
                {200: _json(ProbeList, "Each endpoint's result.")},
                (),
            )
        },
        "/v1/channels": {
            "get": _op(
                "The configured chat channels and their router policies (docs/channels.md). "
                "channel.list.",
                {200: _json(ChannelList, "The channels.")},
                (),
            )
        },
        "/v1/channels/{channel}/messages": {
            "post": _op(
                "Route one message into a channel as its connector would (RouteMessage): the "
                "router's decision, accepted with the run it started or continued, or refused "
                "with the reason. channel.route.",
                {200: _json(RouteResult, "The decision.")},
                (400, 404, 413, 503),
                parameters=(CHANNEL,),
                body=MessageBody,
                body_required=True,
            )
        },
        "/v1/channels/{channel}/pair-codes": {
            "post": _op(
                "Mint a single-use pairing code (shown in this answer only; the journal keeps "
                "a scrypt digest). channel.pair.",
                {201: _json(MintedCode, "The code.")},
                (400, 404, 413, 503),
                parameters=(CHANNEL,),
                body=PairCodeRequest,
            )
        },
        "/v1/channels/{channel}/webhook": {
            "post": _op(
                "The webhook connector's inbound route: no bearer token; the header "
                "X-Reel-Signature: sha256=<hex HMAC-SHA256 of the raw body> is the "
                "authentication (401 when missing or wrong, nothing recorded).",
                {200: _json(RouteResult, "The decision.")},
                (400, 401, 404, 413, 503),
                parameters=(
                    CHANNEL,
                    {
                        "name": "X-Reel-Signature",
                        "in": "header",
                        "required": True,
                        "description": "sha256=<hex HMAC-SHA256 of the raw body>.",
                        "schema": {"type": "string", "pattern": "^sha256=[0-9a-f]{64}$"},
                    },
                ),
                body=MessageBody,
                body_required=True,
                public=True,
            )
        },
        "/v1/whoami": {
            "get": _op(
                "Who the token speaks for (principal, roles, token id) and, per API action, "
                "whether it may do it on what others own (may) and on what it owns (may_own). "
                "Any valid token; nothing is journaled.",
                {200: _json(Whoami, "The caller.")},
                (),
            )
        },
        "/v1/openapi.json": {
            "get": _op(
                "This document.",
                {
                    200: {
                        "description": "OpenAPI 3.1.",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                },
                (),
            )
        },
        "/metrics": {
            "get": _op(
                "Prometheus metrics (text exposition 0.0.4).",
                {
                    200: {
                        "description": "Runs by state, events appended, append latency, "
                        "approvals pending, projection lag, open incidents per domain.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
                (),
            )
        },
        "/healthz": {
            "get": _op(
                "Liveness (no authentication).",
                {
                    200: _json(
                        Health,
                        "Serving (status catching_up: the views are still "
                        "folding what they lacked at start).",
                    ),
                    503: _json(Health, "Draining: shutting down."),
                },
                (),
                public=True,
            )
        },
    }


def _with_components(paths: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``paths`` with each type reference (:func:`_ref`) made a ``$ref``, and the component
    schemas of those types (msgspec's, of the very types the handlers decode and encode).

    Generators need more than valid JSON Schema: each component's ``title`` is its name (two
    equal titles made openapi-python-client drop a response), and a ``Literal`` is a component
    named for where it stands (``<Component><Field>``), or a ``const`` when it has one value
    (an inline enum is a numbered class to datamodel-codegen: ``Kind1`` ... ``Kind54``)."""
    kinds = {node["$ref"]: None for node in _objects(paths) if isinstance(node.get("$ref"), type)}
    refs, components = msgspec.json.schema_components(tuple(kinds), ref_template=REF)
    names = {key: _component_name(key) for key in components}
    taken = [name for name in names.values() if list(names.values()).count(name) > 1]
    if taken:
        raise ValueError(f"two component schemas would be named {taken[0]}")
    full = {REF.format(name=key): REF.format(name=name) for key, name in names.items()}
    schemas = {
        names[key]: {**_resolved(schema, full.__getitem__), "title": names[key]}
        for key, schema in components.items()
    }
    ref_of = {kind: full[ref["$ref"]] for kind, ref in zip(kinds, refs, strict=True)}
    for owner in list(schemas):
        properties = schemas[owner].get("properties", {})
        for field, schema in properties.items():
            properties[field] = _named_enums(schema, owner + _pascal(field), schemas)
    return _resolved(paths, ref_of.__getitem__), dict(sorted(schemas.items()))


def _component_name(key: str) -> str:
    """msgspec qualifies a class name that two modules use (``events.catalog.RunStarted``,
    ``transports.http.bodies.RunStarted``): the event is ``<Name>Event``, the API's own body
    keeps the plain name."""
    module, _, name = key.rpartition(".")
    return f"{name}Event" if module.startswith("events.") else name


def _named_enums(schema: Any, name: str, schemas: dict[str, Any]) -> Any:
    """``schema`` with each enum it holds made a ``const`` (one value) or a reference to the
    component ``name`` (added to ``schemas``)."""
    if isinstance(schema, list):
        return [_named_enums(item, name, schemas) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if "enum" not in schema:
        return {key: _named_enums(value, name, schemas) for key, value in schema.items()}
    values = schema["enum"]
    rest = {key: value for key, value in schema.items() if key not in ("enum", "type")}
    if len(values) == 1:
        return {**rest, "const": values[0]}
    enum: dict[str, Any] = {"title": name, "enum": values}
    if all(isinstance(value, str) for value in values):
        enum = {"title": name, "type": "string", "enum": values}
    if schemas.setdefault(name, enum) != enum:
        raise ValueError(f"the enum of {name} would replace the component schema {name}")
    return {"$ref": REF.format(name=name), **rest}


def _pascal(field: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in field.split("_"))


def _objects(value: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in ``value``, ``value`` included."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from _objects(item)


def _resolved(value: Any, ref: Callable[[Any], str]) -> Any:
    """``value`` rebuilt with ``ref`` applied to every reference in it: each ``$ref`` and each
    target of a discriminator's ``mapping``."""
    if isinstance(value, list):
        return [_resolved(item, ref) for item in value]
    if not isinstance(value, dict):
        return value
    out = {key: ref(item) if key == "$ref" else _resolved(item, ref) for key, item in value.items()}
    if "propertyName" in value and isinstance(value.get("mapping"), dict):
        out["mapping"] = {key: ref(target) for key, target in value["mapping"].items()}
    return out


def operation_id(handler: Callable[..., Any]) -> str:
    """An operation's ``operationId``: its handler's name in camelCase (``list_sessions`` ->
    ``listSessions``). Handlers' names are unique across the app (a test holds every served
    route to it), so renaming a handler renames its method in every generated client."""
    first, *rest = handler.__name__.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _with_operation_ids(paths: dict[str, Any]) -> dict[str, Any]:
    """Each operation of ``paths`` with the ``operationId`` of the handler that serves it, and
    its path's first segment as its tag (generated clients group their calls by it)."""
    handlers = {
        (route.method.lower(), route.path): route.handler
        for table in (routes, *ROUTES)
        for route in table
        if isinstance(route, web.RouteDef)
    }
    out: dict[str, Any] = {}
    for path, item in paths.items():
        tag = path.removeprefix("/v1").split("/")[1].split(".")[0]
        out[path] = {}
        for method, op in item.items():
            handler = handlers.get((method, path))
            named = {"operationId": operation_id(handler)} if handler is not None else {}
            out[path][method] = {**named, "tags": [tag], **op}
    return out


@cache
def document() -> dict[str, Any]:
    """The OpenAPI document (built once)."""
    paths, schemas = _with_components(_paths())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "reel",
            "version": version(),
            "description": "The reel node's HTTP API. Every route but /healthz needs "
            "`Authorization: Bearer <token>` (the data dir's admin.token or a token from "
            "POST /v1/tokens), and each is a Cedar decision on its action "
            "(docs/policy.md). Errors are "
            '`{"error": {"code", "message", "field"}}`.',
        },
        "paths": _with_operation_ids(paths),
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


@cache
def query_parameters() -> dict[tuple[str, str], frozenset[str]]:
    """(method, path template) -> the query parameters the operation takes (HEAD as GET)."""
    taken: dict[tuple[str, str], frozenset[str]] = {}
    for path, item in document()["paths"].items():
        for method, op in item.items():
            names = frozenset(p["name"] for p in op.get("parameters", ()) if p["in"] == "query")
            taken[(method.upper(), path)] = names
            if method == "get":
                taken[("HEAD", path)] = names
    return taken


@cache
def document_bytes() -> bytes:
    return msgspec.json.encode(document())


@routes.get("/v1/openapi.json")
async def get_openapi(request: web.Request) -> web.Response:
    await permit(request, "node.read")
    return web.Response(body=document_bytes(), content_type="application/json")
