"""What the session and run commands share: a list read page by page from the node's API with
the filters ``GET /v1/runs`` and ``GET /v1/sessions`` take, or, with no node, from the journal
folded by the view's own ``apply`` (:func:`projections.base.folded`), and a table to print.

Offline, a list is the journal's truth (a stopped node's views.db may trail it); ``--search``
then looks in the same fields as the API's ``?q=`` (:func:`projections.records.run_text`,
:func:`~projections.records.session_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlencode

import msgspec

from transports.cli.node_api import api

if TYPE_CHECKING:
    from projections.base import Projection

R = TypeVar("R", bound=msgspec.Struct)

PAGE = 200
"""Rows asked of the API per request."""


def listed(
    data_dir: Path,
    token_file: Path | None,
    path: str,
    query: dict[str, str],
    limit: int,
    cls: type[R],
    options: dict[str, str],
) -> list[R]:
    """Up to ``limit`` items of the API list at ``path``, following its cursor; a refused
    filter exits 2 naming the option (``options``: query field -> ``--option``)."""
    asked = {key: value for key, value in query.items() if value}
    items: list[R] = []
    while len(items) < limit:
        asked["limit"] = str(min(PAGE, limit - len(items)))
        page = api(data_dir, token_file, "GET", f"{path}?{urlencode(asked)}", None, 200, options)
        items += msgspec.convert(page["items"], list[cls])  # type: ignore[valid-type]
        if page.get("next_after") is None:
            break
        asked["after"] = page["next_after"]
    return items


def folded_rows(
    data: Path | None, projection: Projection, cls: type[R], sql: str, args: tuple[Any, ...] = ()
) -> list[R]:
    """The rows ``sql`` selects from ``projection`` folded from the journal of a data dir no
    node holds (none on a data dir without a journal: a fresh one)."""
    from events import JournalReader
    from projections.base import folded
    from projections.queries import typed_rows
    from transports.cli.data_dir import journal_path, resolve

    path = journal_path(resolve(data))
    if not path.exists():
        return []
    assert projection.kinds is not None, "a list folds the kinds its view handles"
    reader = JournalReader.open(path)
    try:
        with folded(projection, reader.events_of_kinds(tuple(projection.kinds))) as conn:
            return typed_rows(conn, cls, sql, args)
    finally:
        reader.close()


def searched(
    items: Sequence[R], text: str | None, fields: Callable[[R], tuple[Any, ...]]
) -> list[R]:
    """``items`` whose ``fields`` contain ``text``, casefolded (the API's ``?q=``)."""
    if text is None:
        return list(items)
    wanted = text.casefold()
    return [item for item in items if any(wanted in (f or "").casefold() for f in fields(item))]


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """``rows`` as a table on stdout: drawn by rich on a terminal, folded to its width; into a
    pipe or file, plain columns and one line per row, whatever their length (for grep)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    terminal = console.is_terminal
    if not terminal:
        console = Console(width=100_000, no_color=True)
    shown = Table(
        title=title,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
        box=box.HEAVY_HEAD if terminal else None,
    )
    for column in columns:
        shown.add_column(column, overflow="fold" if terminal else "ignore", no_wrap=not terminal)
    for row in rows:
        shown.add_row(*row)
    console.print(shown)


def when(ms: int | None) -> str:
    """A time of the views (ms since the epoch) in local time, or ``-``."""
    import time

    if ms is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
