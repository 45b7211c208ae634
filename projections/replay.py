"""Audit replay: rebuild every projection from position 0 into a fresh file and compare it with
the live views row by row. Identical views prove they follow from the journal alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import msgspec

from events import JournalReader
from projections.projector import Progress, Projector, all_projections


class Difference(msgspec.Struct, frozen=True, kw_only=True):
    """One row that differs: present on one side only, or with other values."""

    table: str
    key: str
    live: str | None
    replayed: str | None


class ReplayReport(msgspec.Struct, frozen=True, kw_only=True):
    events: int
    position: int
    """The journal position both sides were compared at."""
    elapsed_s: float
    differences: list[Difference]

    @property
    def identical(self) -> bool:
        return not self.differences


def rebuild(
    reader: JournalReader, path: Path, until: int | None = None, progress: Progress | None = None
) -> int:
    """Fold the journal (up to ``until``) into a fresh views file at ``path``."""
    if path.exists():
        path.unlink()
    projector = Projector(reader, path, durable=False)
    try:
        return projector.catch_up(until=until, progress=progress)
    finally:
        projector.close()


def compare(live: Path, replayed: Path, limit: int = 1000) -> list[Difference]:
    """Row-by-row differences between two views files (at most ``limit``)."""
    out: list[Difference] = []
    a = apsw.Connection(str(live), flags=apsw.SQLITE_OPEN_READONLY)
    b = apsw.Connection(str(replayed), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        for projection in all_projections():
            for table in projection.tables:
                left = dict(_rows(a, table))
                right = dict(_rows(b, table))
                for key in sorted(left.keys() | right.keys()):
                    if left.get(key) != right.get(key):
                        out.append(
                            Difference(
                                table=table, key=key, live=left.get(key), replayed=right.get(key)
                            )
                        )
                        if len(out) >= limit:
                            return out
    finally:
        a.close()
        b.close()
    return out


def _rows(conn: apsw.Connection, table: str) -> Iterator[tuple[str, str]]:
    cur = conn.execute(f"SELECT * FROM {table}")
    names = [d[0] for d in cur.getdescription()]
    pk = [c[1] for c in conn.execute(f"PRAGMA table_info({table})") if c[5]]
    for row in cur:
        values = dict(zip(names, row, strict=True))
        key = "|".join(str(values[k]) for k in pk)
        yield key, msgspec.json.encode(values).decode()


def replay(
    reader: JournalReader, live: Path, scratch: Path, progress: Progress | None = None
) -> ReplayReport:
    """Rebuild into ``scratch`` up to the live views' position and compare with ``live``."""
    started = time.perf_counter()
    conn = apsw.Connection(str(live), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        positions = [int(p) for (p,) in conn.execute("SELECT position FROM projection_checkpoints")]
    finally:
        conn.close()
    position = min(positions) if positions else 0
    events = rebuild(reader, scratch, until=position, progress=progress)
    differences = compare(live, scratch)
    return ReplayReport(
        events=events,
        position=position,
        elapsed_s=round(time.perf_counter() - started, 3),
        differences=differences,
    )
