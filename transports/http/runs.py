"""``/v1/runs``: the runs (filtered, paged), a run's record, its tape page by page, and
cancellation.

The live tape (Server-Sent Events) is in :mod:`transports.http.stream`.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from actors.messages import CancelRun
from projections import RawTapeRecord, RunFilter, RunRecord
from projections.records import run_text
from transports.http.bodies import CancelRunRequest, RunPage, TapePage
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    RUN_FILTERS,
    TAPE_CAP,
    after_seq,
    page_limit,
    path_id,
    query_filter,
    read_body,
)
from transports.http.listing import list_reply
from transports.http.replies import json_reply

routes = web.RouteTableDef()


class _TapePageWire(msgspec.Struct, frozen=True, kw_only=True):
    """:class:`TapePage` as sent: the same fields, entries with their events as stored JSON."""

    items: list[RawTapeRecord]
    limit: int
    limit_clamped: bool
    next_after: int | None


assert _TapePageWire.__struct_fields__ == TapePage.__struct_fields__


@routes.get("/v1/runs")
async def list_runs(request: web.Request) -> web.Response:
    """Every run by id (acceptance order, or newest first), narrowed by the filters and ``q``;
    run.list, then each run is shown only when the caller may read it (run.read: an agent sees
    the runs of its sessions)."""
    return await list_reply(
        request,
        where=lambda r: query_filter(r, RunFilter, RUN_FILTERS),
        fetch=lambda ctx, where, after, n, newest: ctx.views.runs(
            where, after, n, newest_first=newest
        ),
        key=lambda run: run.run_id,
        text_of=run_text,
        actions=("run.list", "run.read"),
        scope=lambda authority: authority.run_scope,
        page=RunPage,
    )


@routes.get("/v1/runs/{run_id}")
async def get_run(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    record = await run_record(ctx, path_id(request, "run_id", "run"))
    await permit(request, "run.read", ctx.authority.run_scope(record))
    return json_reply(record)


@routes.get("/v1/runs/{run_id}/tape")
async def get_run_tape(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    run_id = path_id(request, "run_id", "run")
    limit = page_limit(request, TAPE_CAP)
    after = after_seq(request)
    record = await run_record(ctx, run_id)
    await permit(request, "run.read", ctx.authority.run_scope(record))
    rows = ctx.views.tape_raw(run_id, after_seq=after, limit=limit.value + 1)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    return json_reply(
        _TapePageWire(
            items=items,
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].tape_seq if more else None,
        )
    )


@routes.post("/v1/runs/{run_id}/cancel")
async def cancel_run(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    run_id = path_id(request, "run_id", "run")
    await read_body(request, CancelRunRequest, optional=True)
    record = await run_record(ctx, run_id)
    who = await permit(request, "run.cancel", ctx.authority.run_scope(record))
    await ctx.command(CancelRun(run_id=run_id, principal=who.principal))
    await ctx.caught_up()
    return json_reply(await run_record(ctx, run_id), status=202)


async def run_record(ctx: ApiContext, run_id: str) -> RunRecord:
    """The run's row (waiting for lagging views on a miss), or a 404."""
    views = ctx.views
    record = await ctx.fresh(lambda: views.run(run_id))
    if record is None:
        raise ApiError("not_found", f"no run with id {run_id!r}")
    return record
