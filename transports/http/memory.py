"""``/v1/memory``: write, search, list, read and delete memory items (docs/memory.md).

Who sees what: a principal only ever sees the items visible to it: the global ones, its own
(scope ``principal``), and those of the sessions it may read (``session.read``). An item it
cannot see is a 404, as if it did not exist (no oracle); one it sees is then a Cedar decision:
``memory.read``, ``memory.write``, ``memory.delete`` on the item (context: its ``scope``, its
``owner`` and ``session_id``; :meth:`~transports.access.authority.Authority.memory_scope`), and
``memory.list`` for a search or a list, whose items are then filtered by ``memory.read``.

A search (``?q=``) covers what a run of the caller would be shown: the global items, the
caller's own, and, with ``session_id``, that session's (which the caller must be able to read).
A list (no ``q``) pages through every item the caller sees, in id (write) order.

Writes and deletes go through :mod:`actors.memory.items`, the one home of their rules; its
refusals come back as 400s naming the field (``$.text`` and the cap for an oversized text).
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Annotated

import msgspec
from aiohttp import web

from actors.memory.items import (
    TAG_MAX_CHARS,
    ItemState,
    MemoryInputError,
    check_write,
    delete_item,
    item_state,
    write_item,
)
from events import new_id
from events.catalog import MEMORY_TAGS_MAX, MEMORY_TEXT_MAX_CHARS, MemoryScope
from projections import MemoryHit, MemoryItem
from transports.access.authority import AccessError, Scope
from transports.access.tokens import Credentials
from transports.http.bodies import ULID_PATTERN
from transports.http.context import CONTEXT, ApiContext, caller, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    LIST_CAP,
    after_id,
    is_ulid,
    page_limit,
    path_id,
    query_reason,
    read_body,
)
from transports.http.replies import json_reply

routes = web.RouteTableDef()

K_DEFAULT = 5
K_MAX = 50
"""The most hits one search returns."""
QUERY_MAX_CHARS = 2000


_TAG = {"minLength": 1, "maxLength": TAG_MAX_CHARS}


class MemoryWriteRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/memory``: a new memory item (the text at most ``MEMORY_TEXT_MAX_CHARS``,
    8,000 characters; at most ``MEMORY_TAGS_MAX``, 16, tags)."""

    # The caps are checked by actors.memory.items (the one home of the rules, whose refusals name
    # the cap); the schema only states them, so that /v1/openapi.json tells clients the truth.
    text: Annotated[
        str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": MEMORY_TEXT_MAX_CHARS})
    ]
    tags: Annotated[
        list[Annotated[str, msgspec.Meta(extra_json_schema=_TAG)]],
        msgspec.Meta(extra_json_schema={"maxItems": MEMORY_TAGS_MAX}),
    ] = []
    scope: MemoryScope = "principal"
    """Who is shown it: runs for the writer (``principal``), runs of ``session_id``
    (``session``), or every run (``global``)."""
    session_id: Annotated[str, msgspec.Meta(pattern=ULID_PATTERN)] | None = None
    """The session of a ``session`` item (and only of one)."""
    expires_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    """RFC 3339 with an offset; in the future. Absent: never expires."""


class MemoryWritten(msgspec.Struct, frozen=True, kw_only=True):
    """``POST /v1/memory``' answer: the new item's id and the item as the view holds it
    (null when the views have not caught up yet; ``GET /v1/memory/{id}`` then finds it)."""

    id: str
    item: MemoryItem | None


class MemoryDeleted(msgspec.Struct, frozen=True, kw_only=True):
    """``DELETE /v1/memory/{id}``' answer: the item as the view now holds it (deleted: with
    ``deleted_at_ms``, ``deleted_by``, ``deleted_reason``; null when the views have not caught
    up yet)."""

    id: str
    item: MemoryItem | None


class MemorySearch(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/memory?q=``: the best items the caller may read, best first, each with its
    scores (``lexical``, ``vector``, ``recency``, ``final``, each 0-1). The query is not
    echoed: it may hold what the caller should not see again in a log or a proxy's cache."""

    k: int
    session_id: str | None
    hits: list[MemoryHit]


class MemoryPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/memory``: the items the caller may read, in id (write) order."""

    items: list[MemoryItem]
    limit: int
    limit_clamped: bool
    next_after: str | None


def visible(
    ctx: ApiContext, who: Credentials, scope: str, owner: str | None, sid: str | None
) -> bool:
    """Whether ``who`` sees an item: global, its own, or of a session it may read."""
    if scope == "global":
        return True
    if scope == "principal":
        return owner == who.principal
    try:
        return ctx.authority.may(who, "session.read", ctx.authority.session_scope(sid or ""))
    except AccessError:
        return False


def item_scope(ctx: ApiContext, item: MemoryItem) -> Scope:
    return ctx.authority.memory_scope(
        item.item_id, item.scope, item.principal, item.session_id, item.written_by
    )


def state_scope(ctx: ApiContext, state: ItemState) -> Scope:
    return ctx.authority.memory_scope(
        state.item_id, state.scope, state.owner, state.session_id, state.written_by
    )


def _may_read(ctx: ApiContext, who: Credentials, item: MemoryItem) -> bool:
    if not visible(ctx, who, item.scope, item.principal, item.session_id):
        return False
    try:
        return ctx.authority.may(who, "memory.read", item_scope(ctx, item))
    except AccessError:
        return False


@routes.post("/v1/memory")
async def write_memory(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    body = await read_body(request, MemoryWriteRequest)
    who = caller(request)
    journal = ctx.runtime.journal
    now_ms = int(time.time() * 1000)
    expires = None if body.expires_at is None else int(body.expires_at.timestamp() * 1000)
    checked = await asyncio.to_thread(
        check_write,
        journal,
        body.text,
        tags=body.tags,
        scope=body.scope,
        session_id=body.session_id,
        expires_at_ms=expires,
        now_ms=now_ms,
    )
    item_id = new_id()  # before the decision, so that access.decided names the item
    # (a session created a moment ago may not be in the views yet: ctx.scope waits for them)
    scope = await ctx.scope(
        lambda: ctx.authority.memory_scope(
            item_id, checked.scope, who.principal, checked.session_id, who.principal
        )
    )
    await permit(request, "memory.write", scope)
    await asyncio.to_thread(
        write_item,
        journal,
        checked.text,
        principal=who.principal,
        tags=checked.tags,
        scope=checked.scope,
        session_id=checked.session_id,
        expires_at_ms=checked.expires_at_ms,
        now_ms=now_ms,
        item_id=item_id,
    )
    view = ctx.runtime.memory.view
    item = await ctx.appear(lambda: view.get(item_id, include_expired=True))
    return json_reply(MemoryWritten(id=item_id, item=item), status=201)


def _k(request: web.Request) -> int:
    raw = request.query.get("k")
    if raw is None:
        return K_DEFAULT
    text = raw.strip()
    if not text.isdigit() or not 1 <= int(text) <= K_MAX:
        raise ApiError("invalid_argument", f"k must be an integer from 1 to {K_MAX}", "query.k")
    return int(text)


def _query(request: web.Request) -> str | None:
    raw = request.query.get("q")
    if raw is None:
        return None
    if not raw.strip():
        raise ApiError("invalid_argument", "q is blank: give the words to look for", "query.q")
    if len(raw) > QUERY_MAX_CHARS:
        raise ApiError(
            "invalid_argument", f"q is longer than {QUERY_MAX_CHARS} characters", "query.q"
        )
    return raw


async def _session(ctx: ApiContext, who: Credentials, request: web.Request) -> str | None:
    """The ``session_id`` a search also covers: a session the caller may read (else 404)."""
    raw = request.query.get("session_id")
    if raw is None:
        return None
    if not is_ulid(raw):
        raise ApiError("invalid_argument", "session_id must be a session id", "query.session_id")
    try:
        scope = await ctx.scope(lambda: ctx.authority.session_scope(raw))
    except AccessError:
        raise ApiError("not_found", f"no session {raw}", "query.session_id") from None
    if not ctx.authority.may(who, "session.read", scope):
        raise ApiError("not_found", f"no session {raw}", "query.session_id")
    return raw


@routes.get("/v1/memory")
async def search_memory(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    query = _query(request)
    k = _k(request)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    who = await permit(request, "memory.list")
    view = ctx.runtime.memory.view
    if query is not None:
        for name in ("after", "limit"):
            if name in request.query:
                raise ApiError(
                    "invalid_argument",
                    f"a search (q) is not paged: {name} is for a list, k for a search",
                    f"query.{name}",
                )
        session_id = await _session(ctx, who, request)
        hits = await asyncio.to_thread(
            view.search, query, k, principal=who.principal, session_id=session_id
        )
        return json_reply(
            MemorySearch(
                k=k,
                session_id=session_id,
                hits=[h for h in hits if _may_read(ctx, who, h.item)],
            )
        )
    if "k" in request.query or "session_id" in request.query:
        name = "k" if "k" in request.query else "session_id"
        raise ApiError("invalid_argument", f"{name} is for a search: give q", f"query.{name}")
    rows = await asyncio.to_thread(view.items, everyone=True, after=after, limit=limit.value + 1)
    more = len(rows) > limit.value
    page = rows[: limit.value]
    # Filtered after paging (as approvals are): a page may hold fewer items and still go on.
    return json_reply(
        MemoryPage(
            items=[item for item in page if _may_read(ctx, who, item)],
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=page[-1].item_id if more else None,
        )
    )


@routes.get("/v1/memory/{item_id}")
async def get_memory_item(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    item_id = path_id(request, "item_id", "memory item")
    who = caller(request)
    view = ctx.runtime.memory.view
    item = await ctx.fresh(lambda: view.get(item_id))
    if item is None or not visible(ctx, who, item.scope, item.principal, item.session_id):
        raise ApiError("not_found", f"no memory item {item_id}")
    await permit(request, "memory.read", await ctx.scope(lambda: item_scope(ctx, item)))
    return json_reply(item)


@routes.delete("/v1/memory/{item_id}")
async def delete_memory_item(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    item_id = path_id(request, "item_id", "memory item")
    reason = query_reason(request)
    who = caller(request)
    journal = ctx.runtime.journal
    state = await asyncio.to_thread(item_state, journal, item_id)
    if state is None or not visible(ctx, who, state.scope, state.owner, state.session_id):
        raise ApiError("not_found", f"no memory item {item_id}")
    if state.deleted:
        raise ApiError("conflict", f"memory item {item_id} is already deleted")
    await permit(request, "memory.delete", await ctx.scope(lambda: state_scope(ctx, state)))
    try:
        await asyncio.to_thread(
            delete_item, journal, item_id, principal=who.principal, reason=reason
        )
    except MemoryInputError as exc:  # the reason is a query parameter
        raise ApiError("invalid_argument", exc.message, f"query.{exc.field}") from None
    view = ctx.runtime.memory.view

    def deleted() -> MemoryItem | None:
        found = view.get(item_id, include_deleted=True, include_expired=True)
        return found if found is not None and found.deleted_at_ms is not None else None

    gone = await ctx.appear(deleted)
    return json_reply(MemoryDeleted(id=item_id, item=gone))
