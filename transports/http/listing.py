"""One page of a list the caller reads item by item: plain, or searched with ``?q=``.

A plain page is read from the view (``limit + 1`` rows to know whether more exist) and then
filtered by the caller's read action: it may hold fewer items than the limit and still go on,
and its cursor is the last row read, whoever may read it (docs/http-api.md, "Paging").

A searched page must not say anything about the rows the caller may not read, or ``?q=`` would
be an oracle on them (does any run's answer, readable or not, contain this text?). So the rows
are read in key order, each kept when it contains the text and the caller may read it, until
the page is full plus one, the rows end, or :data:`SCAN_ROWS` rows were read. The cursor is
then the last item returned (more readable matches exist), null (the rows ended), or the last
row read (the scan stopped: the same row whatever the text and whoever asks, so it tells
nothing of either). Every cursor can be passed on as ``after``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import msgspec
from aiohttp import web

from transports.access.authority import Authority, Scope
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.inputs import LIST_CAP, after_id, newest_first, page_limit, search_text
from transports.http.replies import json_reply

T = TypeVar("T")
F = TypeVar("F")

SCAN_ROWS = 5000
"""The most rows one searched page reads (a search of a large view goes on page by page)."""
_BATCH = 500

Fetch = Callable[[str | None, int], list[T]]
"""Rows after a cursor (None: from the start), at most so many, in the list's order."""


class Listing(NamedTuple, Generic[T]):
    items: list[T]
    next_after: str | None


def plain_page(
    fetch: Fetch[T],
    key: Callable[[T], str],
    readable: Callable[[list[T]], list[T]],
    after: str | None,
    limit: int,
) -> Listing[T]:
    """A page of ``limit`` rows after ``after``, then only those the caller may read."""
    rows = fetch(after, limit + 1)
    items = rows[:limit]
    return Listing(readable(items), key(items[-1]) if len(rows) > limit else None)


def searched_page(
    fetch: Fetch[T],
    key: Callable[[T], str],
    readable: Callable[[list[T]], list[T]],
    text: str,
    fields: Callable[[T], tuple[str | None, ...]],
    after: str | None,
    limit: int,
) -> Listing[T]:
    """Up to ``limit`` rows the caller may read whose ``fields`` contain ``text`` (casefolded:
    :func:`transports.http.inputs.search_text`), after ``after``; see the module docstring."""
    found: list[T] = []
    cursor = after
    read = 0
    while read < SCAN_ROWS:
        want = min(_BATCH, SCAN_ROWS - read)
        rows = fetch(cursor, want)
        read += len(rows)
        hits = [r for r in rows if any(text in (f or "").casefold() for f in fields(r))]
        found.extend(readable(hits))
        if len(found) > limit:
            return Listing(found[:limit], key(found[limit - 1]))
        if len(rows) < want:
            return Listing(found, None)
        cursor = key(rows[-1])
    return Listing(found, cursor)


class Page(Protocol):
    """What a list's reply carries (``SessionPage``, ``RunPage``...)."""

    def __call__(
        self, *, items: list[Any], limit: int, limit_clamped: bool, next_after: str | None
    ) -> msgspec.Struct: ...


async def list_reply(
    request: web.Request,
    *,
    where: Callable[[web.Request], F],
    fetch: Callable[[ApiContext, F, str | None, int, bool], list[T]],
    key: Callable[[T], str],
    text_of: Callable[[T], tuple[str | None, ...]],
    actions: tuple[str, str],
    scope: Callable[[Authority], Callable[[T], Scope]],
    page: Page,
) -> web.Response:
    """``GET`` of a list the caller reads item by item: its filters (``where``), ``q``,
    ``order``, ``after`` and ``limit``; the list action (``actions[0]``) is decided once, then
    each item shown only when the caller may read it (``actions[1]`` on its ``scope``)."""
    ctx = request.app[CONTEXT]
    wanted = where(request)
    text = search_text(request)
    newest = newest_first(request)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    list_action, read_action = actions
    who = await permit(request, list_action)

    def rows(cursor: str | None, n: int) -> list[T]:
        return fetch(ctx, wanted, cursor, n, newest)

    def readable(items: list[T]) -> list[T]:
        return ctx.readable(who, read_action, items, scope(ctx.authority))

    listed = (
        plain_page(rows, key, readable, after, limit.value)
        if text is None
        else searched_page(rows, key, readable, text, text_of, after, limit.value)
    )
    return json_reply(
        page(
            items=listed.items,
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=listed.next_after,
        )
    )
