"""``/v1/sessions/{id}/postures``: every tool of the node with the posture it has in one
session and the session's overrides with who set them and when (``GET``), and setting or
removing one override (``POST``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import cast

import msgspec
from aiohttp import web

from actors.aggregate import fold
from actors.approvals.gate import ToolGate
from actors.messages import SessionInfo, SetSessionPosture
from actors.sessions import state as session_state
from actors.stream import recorded
from events import StoredEvent
from tools.catalog import ToolCatalog
from tools.spec import Posture, Risk
from transports.http.bodies import PostureRequest
from transports.http.context import CONTEXT, permit
from transports.http.inputs import path_id, read_body
from transports.http.replies import json_reply
from transports.http.sessions import session_record

routes = web.RouteTableDef()


class ToolPosture(msgspec.Struct, frozen=True, kw_only=True):
    """One tool in one session."""

    tool: str
    risk: Risk
    posture: Posture
    """What a call of this session's runs meets: the override, else ``node_posture``."""
    node_posture: Posture
    """Without the session's override: ``[tools.postures]`` or the tool's default;
    ``disabled`` for a tool that cannot run on this node (no override lifts that)."""
    override: Posture | None
    """This session's override (``POST /v1/sessions/{id}/postures``), or null."""
    set_by: str | None
    """Who set the override (null: none)."""
    set_at_ms: int | None
    unavailable: str | None
    """Why the tool cannot run on this node, or null."""


class SessionPostures(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/sessions/{id}/postures``: the node's tools by name."""

    session_id: str
    items: list[ToolPosture]


@routes.post("/v1/sessions/{session_id}/postures")
async def set_session_posture(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    body = await read_body(request, PostureRequest)
    await session_record(ctx, session_id)
    who = await permit(
        request,
        "posture.set",
        ctx.authority.posture_scope(session_id, body.tool, body.posture or ""),
    )
    info: SessionInfo = await ctx.command(
        SetSessionPosture(
            session_id=session_id, tool=body.tool, posture=body.posture, principal=who.principal
        )
    )
    return json_reply(await session_record(ctx, info.session_id, wait=True))


@routes.get("/v1/sessions/{session_id}/postures")
async def list_session_postures(request: web.Request) -> web.Response:
    """session.read of the session, then tool.list: the overrides are folded from the
    session's stream in the journal (the session actor's own fold; the views hold no copy)."""
    ctx = request.app[CONTEXT]
    session_id = path_id(request, "session_id", "session")
    record = await session_record(ctx, session_id)
    await permit(request, "session.read", ctx.authority.session_scope(record))
    await permit(request, "tool.list")
    journal = ctx.runtime.journal
    stored = await asyncio.to_thread(journal.read_stream, f"session/{session_id}")
    services = ctx.runtime.node.services
    return json_reply(postures_of(session_id, stored, services.catalog, services.gate))


def postures_of(
    session_id: str, stored: Iterable[StoredEvent], catalog: ToolCatalog, gate: ToolGate
) -> SessionPostures:
    """Each tool of ``catalog`` as the gate decides its posture in the session whose stream
    ``stored`` is; an override's author and time are its ``session.posture_set`` row's."""
    state = fold(session_state, recorded(stored))
    set_by = {o.tool: o for o in state.postures} if state is not None else {}
    overrides = state.overrides if state is not None else {}
    items = []
    for spec in sorted(catalog.specs(), key=lambda s: s.name):
        override = set_by.get(spec.name)
        items.append(
            ToolPosture(
                tool=spec.name,
                risk=spec.risk,
                posture=gate.posture(spec, overrides),
                node_posture=gate.posture(spec),
                override=cast(Posture, override.posture) if override is not None else None,
                set_by=override.set_by if override is not None else None,
                set_at_ms=override.set_at_ms if override is not None else None,
                unavailable=spec.unavailable,
            )
        )
    return SessionPostures(session_id=session_id, items=items)
