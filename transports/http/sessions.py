"""``/v1/sessions``: list, read, create, send a message (start a run), reset, branch, compact,
list checkpoints and restore one (postures: :mod:`transports.http.postures`)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from actors import NotFound
from actors.messages import (
    BranchSession,
    CompactionOutcome,
    CompactSession,
    ResetSession,
    ResolveSession,
    RestoreSession,
    RunTicket,
    SessionInfo,
    StartRun,
)
from actors.sessions.compaction import Checkpoints, checkpoints_of
from projections import SessionFilter, SessionRecord
from projections.records import session_text
from transports.http.bodies import (
    BranchSessionRequest,
    CompactSessionRequest,
    CreateSessionRequest,
    ResetSessionRequest,
    RestoreSessionRequest,
    RunPage,
    RunStarted,
    SendMessageRequest,
    SessionPage,
)
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    LIST_CAP,
    SESSION_FILTERS,
    after_id,
    identifier,
    page_limit,
    path_id,
    query_filter,
    read_body,
)
from transports.http.listing import list_reply
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/sessions")
async def list_sessions(request: web.Request) -> web.Response:
    """Sessions by id (creation order, or newest first), narrowed by the filters and ``q``;
    session.list, then each session is shown only when the caller may read it."""
    return await list_reply(
        request,
        where=lambda r: query_filter(r, SessionFilter, SESSION_FILTERS),
        fetch=lambda ctx, where, after, n, newest: ctx.views.sessions(
            after, n, where, newest_first=newest
        ),
        key=lambda session: session.session_id,
        text_of=session_text,
        actions=("session.list", "session.read"),
        scope=lambda authority: authority.session_scope,
        page=SessionPage,
    )


@routes.get("/v1/sessions/{session_id}")
async def get_session(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    record = await session_record(ctx, session_id)
    await permit(request, "session.read", ctx.authority.session_scope(record))
    return json_reply(record)


@routes.get("/v1/sessions/{session_id}/runs")
async def list_session_runs(request: web.Request) -> web.Response:
    """A session's runs in acceptance order: session.read of the session, then each run shown
    only when the caller may run.read it."""
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    limit = page_limit(request, LIST_CAP)
    after = after_id(request)
    record = await session_record(ctx, session_id)
    who = await permit(request, "session.read", ctx.authority.session_scope(record))
    rows = ctx.views.runs_of_session(session_id, after=after, limit=limit.value + 1)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    # Filtered after paging like GET /v1/runs, so a forbid on run.read holds here too.
    return json_reply(
        RunPage(
            items=ctx.readable(who, "run.read", items, ctx.authority.run_scope),
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].run_id if more else None,
        )
    )


@routes.post("/v1/sessions")
async def create_session(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, CreateSessionRequest, optional=True)
    session_key = identifier(body.session_key, "$.session_key")
    existing = await existing_session(ctx, session_key)
    if existing is None:
        who = await permit(request, "session.create")
    else:  # the key names a session already: creating it again is reading it
        record = await session_record(ctx, existing)
        who = await permit(request, "session.read", ctx.authority.session_scope(record))
    info: SessionInfo = await ctx.command(
        ResolveSession(
            session_key=session_key, label=body.label, create=True, principal=who.principal
        )
    )
    record = await created_session(ctx, info.session_id)
    return json_reply(record, status=201 if info.created else 200)


@routes.post("/v1/sessions/{session_id}/messages")
async def send_message(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    body = await read_body(request, SendMessageRequest)
    record = await session_record(ctx, session_id)
    who = await permit(request, "run.start", ctx.authority.session_scope(record))
    ticket: RunTicket = await ctx.command(
        StartRun(
            text=body.text,
            session_id=session_id,
            label=body.label,
            principal=who.principal,
            channel="http",
        )
    )
    await ctx.caught_up()
    return json_reply(
        RunStarted(
            run_id=ticket.run_id,
            session_id=ticket.session_id,
            session_created=ticket.session_created,
            queued=ticket.queued,
        ),
        status=202,
        headers={"Location": f"/v1/runs/{ticket.run_id}"},
    )


@routes.post("/v1/sessions/{session_id}/reset")
async def reset_session(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    await read_body(request, ResetSessionRequest, optional=True)
    record = await session_record(ctx, session_id)
    who = await permit(request, "session.reset", ctx.authority.session_scope(record))
    info: SessionInfo = await ctx.command(
        ResetSession(session_id=session_id, principal=who.principal)
    )
    return json_reply(await session_record(ctx, info.session_id, wait=True))


@routes.post("/v1/sessions/{session_id}/branch")
async def branch_session(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    body = await read_body(request, BranchSessionRequest, optional=True)
    session_key = identifier(body.session_key, "$.session_key")
    parent = await session_record(ctx, session_id)
    await permit(request, "session.read", ctx.authority.session_scope(parent))
    who = await permit(request, "session.create")
    info: SessionInfo = await ctx.command(
        BranchSession(
            session_id=session_id,
            run_id=body.run_id,
            session_key=session_key,
            label=body.label,
            principal=who.principal,
        )
    )
    return json_reply(await created_session(ctx, info.session_id), status=201)


@routes.post("/v1/sessions/{session_id}/compact")
async def compact_session(request: web.Request) -> web.Response:
    """200 with the compaction made; 202 while the session's model writes the summary."""
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    await read_body(request, CompactSessionRequest, optional=True)
    record = await session_record(ctx, session_id)
    who = await permit(request, "session.compact", ctx.authority.session_scope(record))
    outcome: CompactionOutcome = await ctx.command(
        CompactSession(session_id=session_id, principal=who.principal)
    )
    location = {"Location": f"/v1/sessions/{session_id}/checkpoints"}
    return json_reply(
        outcome, status=200 if outcome.status == "compacted" else 202, headers=location
    )


@routes.get("/v1/sessions/{session_id}/checkpoints")
async def list_session_checkpoints(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    record = await session_record(ctx, session_id)
    await permit(request, "session.read", ctx.authority.session_scope(record))
    return json_reply(await checkpoints(ctx, session_id))


@routes.post("/v1/sessions/{session_id}/restore")
async def restore_session(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    body = await read_body(request, RestoreSessionRequest)
    record = await session_record(ctx, session_id)
    who = await permit(request, "session.restore", ctx.authority.session_scope(record))
    await ctx.command(
        RestoreSession(
            session_id=session_id, checkpoint_id=body.checkpoint, principal=who.principal
        )
    )
    return json_reply(await checkpoints(ctx, session_id))


async def checkpoints(ctx: ApiContext, session_id: str) -> Checkpoints:
    """The session's checkpoints, folded from its stream in the journal (the session actor's
    own fold; the views hold no copy), on a worker thread."""
    journal = ctx.runtime.journal
    stored = await asyncio.to_thread(journal.read_stream, f"session/{session_id}")
    return checkpoints_of(session_id, stored)


async def session_record(ctx: ApiContext, session_id: str, wait: bool = False) -> SessionRecord:
    """The session's row; after a write (``wait``) the views are brought up to date first."""
    views = ctx.views
    if wait:
        await ctx.caught_up()
    record = await ctx.fresh(lambda: views.session(session_id))
    if record is None:
        raise ApiError("not_found", f"no session with id {session_id!r}")
    return record


async def existing_session(ctx: ApiContext, session_key: str | None) -> str | None:
    """The id of the session ``session_key`` names, or None (no key, or no such session)."""
    if session_key is None:
        return None
    try:
        info: SessionInfo = await ctx.command(ResolveSession(session_key=session_key))
    except NotFound:
        return None
    return info.session_id


async def created_session(ctx: ApiContext, session_id: str) -> SessionRecord:
    """A session the node has just created (its first event may commit after the reply)."""
    views = ctx.views
    record = await ctx.appear(lambda: views.session(session_id))
    if record is None:
        raise ApiError("unavailable", f"session {session_id} is not visible yet; retry the read")
    return record
