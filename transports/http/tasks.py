"""``/v1/tasks``: the background tasks (filtered, paged), one task, and cancellation.

Reads come from the tasks view (``projections/tasks.py``); a cancel goes to the node's task
queue, which records ``task.cancelled`` (and sets a running handler's cancel flag) or refuses
a task that already ended (409). Actions: ``task.list`` once per list, then ``task.read`` per
item; ``task.read`` for one task; ``task.cancel`` (journaled as ``access.decided``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from aiohttp import web

from events.catalog import TASK_KIND
from events.redaction.redact import looks_secret
from projections import TASK_STATES, TaskFilter, TaskRecord, TasksView
from projections.pool import ReaderLimits
from transports.access.authority import Scope
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    LIST_CAP,
    QueryFilter,
    after_id,
    newest_first,
    page_limit,
    path_id,
    query_filter,
    read_body,
)
from transports.http.replies import json_reply

routes = web.RouteTableDef()

VIEW = web.AppKey("reel_tasks_view", TasksView)
"""The API's read connections to the tasks view (set by ``build_app``)."""


class CancelTaskRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/tasks/{id}/cancel`` (body optional): why, recorded on ``task.cancelled``."""

    reason: str = ""


class TaskPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of ``GET /v1/tasks``."""

    items: list[TaskRecord]
    limit: int
    limit_clamped: bool
    next_after: str | None
    """The ``after`` of the next page; null when this is the last."""


def _state(raw: str, field: str) -> str:
    if raw not in TASK_STATES:
        raise ApiError("invalid_argument", f"state must be one of {', '.join(TASK_STATES)}", field)
    return raw


def _kind(raw: str, field: str) -> str:
    problem = TASK_KIND.problem(raw, looks_secret)
    if problem is not None:
        raise ApiError("invalid_argument", f"kind {problem}", field)
    return raw


TASK_FILTERS: tuple[QueryFilter, ...] = (
    QueryFilter("state", "Only tasks in this state.", _state, {"enum": list(TASK_STATES)}),
    QueryFilter(
        "kind",
        "Only tasks of this kind (``noop``, ``post_run_reflection``).",
        _kind,
        {
            "type": "string",
            "maxLength": 64,
            "pattern": "^[a-z][a-z0-9_]*(?:\\.[a-z][a-z0-9_]*)*$",
        },
    ),
)
"""``GET /v1/tasks``' filters (:class:`projections.TaskFilter`)."""

assert {f.name for f in TASK_FILTERS} == set(TaskFilter.__struct_fields__)


def task_scope(record: TaskRecord) -> Scope:
    """The Cedar resource and context of an action on a task."""
    return record.task_id, {"task_id": record.task_id, "kind": record.kind}


@routes.get("/v1/tasks")
async def list_tasks(request: web.Request) -> web.Response:
    """Tasks by id (enqueue order, or newest first), narrowed by the filters; only those the
    caller may read."""
    ctx = request.app[CONTEXT]
    where = query_filter(request, TaskFilter, TASK_FILTERS)
    newest = newest_first(request)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    who = await permit(request, "task.list")
    await ctx.caught_up()
    rows = request.app[VIEW].tasks(where, after, limit.value + 1, newest_first=newest)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    # Filtered after paging: a page may hold fewer items than the limit and still go on.
    return json_reply(
        TaskPage(
            items=ctx.readable(who, "task.read", items, task_scope),
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].task_id if more else None,
        )
    )


@routes.get("/v1/tasks/{task_id}")
async def get_task(request: web.Request) -> web.Response:
    record = await task_record(request, path_id(request, "task_id", "task"))
    await permit(request, "task.read", task_scope(record))
    return json_reply(record)


@routes.post("/v1/tasks/{task_id}/cancel")
async def cancel_task(request: web.Request) -> web.Response:
    """Cancel a task that has not ended (409 when it has); a running handler is told to stop."""
    ctx = request.app[CONTEXT]
    task_id = path_id(request, "task_id", "task")
    body = await read_body(request, CancelTaskRequest, optional=True)
    record = await task_record(request, task_id)
    who = await permit(request, "task.cancel", task_scope(record))
    queue = ctx.runtime.node.tasks
    await asyncio.to_thread(queue.cancel, task_id, by=who.principal, reason=body.reason)
    await ctx.caught_up()
    return json_reply(await task_record(request, task_id))


async def task_record(request: web.Request, task_id: str) -> TaskRecord:
    """The task's row (waiting for lagging views on a miss), or a 404."""
    ctx: ApiContext = request.app[CONTEXT]
    view = request.app[VIEW]
    record = await ctx.fresh(lambda: view.task(task_id))
    if record is None:
        raise ApiError("not_found", f"no task with id {task_id!r}")
    return record


def install(app: web.Application, views_path: Path, limits: ReaderLimits | None = None) -> None:
    """Give ``app`` its tasks view (closed with the app)."""
    app[VIEW] = TasksView(views_path, limits)

    async def close_view(_app: web.Application) -> None:
        app[VIEW].close()

    app.on_cleanup.append(close_view)
