"""Audit replay: rebuild every projection from position 0 into a fresh file and compare it with
the live views row by row. Identical views prove they follow from the journal alone.

The comparison covers every projection's tables and ``projection_checkpoints`` (each projection's
version and position), so live views built by another projection version, views that claim
positions the journal does not hold, or a missing table all show up as differences rather than
passing unnoticed. A missing ``views.db`` is not an error: views are rebuildable and may be
deleted at any time, so there is nothing to compare, but the whole journal is still folded to
prove every view can be built from it.
"""

from __future__ import annotations

import time
from pathlib import Path

import apsw
import msgspec

from events import JournalReadPort
from projections.memory.embedders import Embedder
from projections.memory.view import load_vec
from projections.projector import Progress, Projector, all_projections

CHECKPOINTS_TABLE = "projection_checkpoints"
MAX_DIFFERENCES = 1000
"""A report lists at most this many differences (one altered event can change many rows)."""


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One row that differs: present on one side only, or with other values."""

    table: str
    key: str
    live: str | None
    replayed: str | None


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    events: int
    """Events folded into the replayed views."""
    position: int
    """The journal position both sides were compared at: the live views' position (the
    journal's head when there are no live views)."""
    head: int
    """The journal's head when the replay started: above ``position`` when the live views lag
    behind the journal (the node applies the rest when it runs)."""
    live: bool
    """Whether there were live views to compare with (``False``: no views.db, nothing compared)."""
    elapsed_s: float
    differences: list[Difference]

    @property
    def identical(self) -> bool:
        return not self.differences


def rebuild(
    reader: JournalReadPort,
    path: Path,
    until: int | None = None,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> int:
    """Fold the journal (up to ``until``) into a fresh views file at ``path``; returns how many
    events were read. ``embedder`` is the memory view's (the node's ``[memory] embedder``)."""
    if path.exists():
        path.unlink()
    projector = Projector(reader, path, all_projections(embedder), durable=False)
    try:
        return projector.catch_up(until=until, progress=progress)
    finally:
        projector.close()


def compare(live: Path, replayed: Path, limit: int = MAX_DIFFERENCES) -> list[Difference]:
    """Row-by-row differences between two views files (at most ``limit``)."""
    a = _open_readonly(live)
    try:
        b = _open_readonly(replayed)
        try:
            return _compare(a, b, limit)
        finally:
            b.close()
    finally:
        a.close()


def replay(
    reader: JournalReadPort,
    live: Path,
    scratch: Path,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> ReplayReport:
    """Rebuild into ``scratch`` up to the live views' position and compare with ``live``.

    Without a live views file, rebuild the whole journal and compare nothing (``live=False``).
    ``embedder`` must be the node's memory embedder, or the memory view differs by design.
    """
    started = time.perf_counter()
    head = reader.head().position
    if not live.exists():
        events = rebuild(reader, scratch, until=head, progress=progress, embedder=embedder)
        return ReplayReport(
            events=events,
            position=head,
            head=head,
            live=False,
            elapsed_s=round(time.perf_counter() - started, 3),
            differences=[],
        )
    conn = _open_readonly(live)
    try:
        # One read transaction from reading the live position to the last row compared: a node
        # folding into views.db meanwhile cannot move the rows past the position replayed.
        conn.execute("BEGIN")
        position = _live_position(conn)
        events = rebuild(reader, scratch, until=position, progress=progress, embedder=embedder)
        replayed = _open_readonly(scratch)
        try:
            differences = _compare(conn, replayed, MAX_DIFFERENCES)
        finally:
            replayed.close()
    finally:
        conn.close()
    return ReplayReport(
        events=events,
        position=position,
        head=head,
        live=True,
        elapsed_s=round(time.perf_counter() - started, 3),
        differences=differences,
    )


def _open_readonly(path: Path) -> apsw.Connection:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    conn.set_busy_timeout(5000)  # a running node may be committing a batch to views.db
    load_vec(conn)  # to read the memory view's vector table
    return conn


def _live_position(conn: apsw.Connection) -> int:
    """The position every live projection has applied (0 for a views file without any)."""
    if not _columns(conn, CHECKPOINTS_TABLE):
        return 0
    positions = [int(p) for (p,) in conn.execute(f"SELECT position FROM {CHECKPOINTS_TABLE}")]
    return min(positions, default=0)


def _compare(a: apsw.Connection, b: apsw.Connection, limit: int) -> list[Difference]:
    out: list[Difference] = []
    tables = [t for p in all_projections() for t in p.tables] + [CHECKPOINTS_TABLE]
    for table in tables:
        left = _rows(a, table)
        right = _rows(b, table)
        for key in sorted(left.keys() | right.keys()):
            if left.get(key) != right.get(key):
                out.append(
                    Difference(table=table, key=key, live=left.get(key), replayed=right.get(key))
                )
                if len(out) >= limit:
                    return out
    return out


def _columns(conn: apsw.Connection, table: str) -> list[tuple[str, int]]:
    """``(name, position in the primary key or 0)`` per column; empty when there is no table."""
    return [(str(c[1]), int(c[5])) for c in conn.execute(f"PRAGMA table_info({table})")]


def _rows(conn: apsw.Connection, table: str) -> dict[str, str]:
    """The table's rows as JSON objects by primary key ("a|b" for a composite key).

    Column names come from the schema, not from the cursor: an apsw cursor over a query that
    returned no rows has no description. A missing table has no rows; the projection's missing
    ``projection_checkpoints`` row then reports it.
    """
    columns = _columns(conn, table)
    if not columns:
        return {}
    names = [name for name, _ in columns]
    key = [name for name, pk in sorted(columns, key=lambda c: c[1]) if pk]
    selected = ", ".join(f'"{name}"' for name in names)
    rows: dict[str, str] = {}
    for row in conn.execute(f"SELECT {selected} FROM {table}"):
        values = dict(zip(names, row, strict=True))
        rows["|".join(str(values[k]) for k in key)] = msgspec.json.encode(values).decode()
    return rows
