"""``/v1/schedules``: list, create, pause, resume, delete and run-now (docs/schedules.md).

``schedule.list`` is a read; ``schedule.create`` and ``schedule.manage`` are Cedar decisions
with the schedule's ``name``, the principal it ``runs_as`` and the ``operation`` in context
(admins for anyone, operators and agents for themselves: policies/schedules.cedar). Bad timing
or a bad name is a 400 naming the field before any decision; the principal a schedule runs as
must hold a live token (its runs have that principal's roles), checked after the decision so a
caller Cedar refuses learns nothing about whose tokens live.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from actors.schedules.decide import InvalidSchedule, check_name, check_timing
from transports.http.bodies import CreateScheduleRequest, ScheduleList
from transports.http.context import CONTEXT, caller, permit
from transports.http.failures import ApiError
from transports.http.inputs import read_body
from transports.http.replies import json_reply

routes = web.RouteTableDef()


@routes.get("/v1/schedules")
async def list_schedules(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    await permit(request, "schedule.list")
    return json_reply(ScheduleList(items=ctx.runtime.schedules.book.list()))


@routes.post("/v1/schedules")
async def create_schedule(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, CreateScheduleRequest)
    check_name(body.name)
    check_timing(body.cron, body.every, body.tz)
    runs_as = body.runs_as if body.runs_as is not None else caller(request).principal
    scope = (body.name, {"name": body.name, "runs_as": runs_as, "operation": "create"})
    who = await permit(request, "schedule.create", scope)
    if not ctx.runtime.principal_live(runs_as):  # after the decision: no probing whose tokens live
        raise InvalidSchedule("runs_as", f"{runs_as!r} holds no live token (its runs need roles)")
    book = ctx.runtime.schedules.book
    info = await asyncio.to_thread(
        lambda: book.create(
            by=who.principal,
            name=body.name,
            cron=body.cron,
            every=body.every,
            tz=body.tz,
            session_key=body.session_key,
            text=body.text,
            runs_as=runs_as,
            catch_up=body.catch_up,
            overlap=body.overlap,
        )
    )
    return json_reply(info, status=201)


@routes.post("/v1/schedules/{name}/pause")
async def pause_schedule(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    who = await _manage(request, "pause")
    info = await asyncio.to_thread(ctx.runtime.schedules.book.pause, _name(request), by=who)
    return json_reply(info)


@routes.post("/v1/schedules/{name}/resume")
async def resume_schedule(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    who = await _manage(request, "resume")
    info = await asyncio.to_thread(ctx.runtime.schedules.book.resume, _name(request), by=who)
    return json_reply(info)


@routes.post("/v1/schedules/{name}/run")
async def run_schedule_now(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    who = await _manage(request, "run_now")
    fired = await asyncio.to_thread(ctx.runtime.schedules.run_now, _name(request), by=who)
    return json_reply(fired, status=202)


@routes.delete("/v1/schedules/{name}")
async def delete_schedule(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    who = await _manage(request, "delete")
    info = await asyncio.to_thread(ctx.runtime.schedules.book.delete, _name(request), by=who)
    return json_reply(info)


async def _manage(request: web.Request, operation: str) -> str:
    """The caller, once Cedar permits ``schedule.manage`` on the named schedule (an unknown
    name is a 404 before the decision)."""
    name = _name(request)
    schedule = await asyncio.to_thread(request.app[CONTEXT].runtime.schedules.book.get, name)
    scope = (name, {"name": name, "runs_as": schedule.runs_as, "operation": operation})
    return (await permit(request, "schedule.manage", scope)).principal


def _name(request: web.Request) -> str:
    """The schedule's name from the path; one no schedule can have is a 404."""
    try:
        return check_name(request.match_info["name"])
    except InvalidSchedule:
        raise ApiError("not_found", "no schedule of that name (see GET /v1/schedules)") from None
