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
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")

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
