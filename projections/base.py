"""The projection seam: a named, versioned fold of journal events into tables of views.db.

Each projection owns its tables (``ddl``) and says which event kinds it handles; ``apply`` writes
rows for one event inside the projector's transaction. Bumping ``version`` makes the projector
drop and rebuild that projection's tables from position 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

import apsw

from events import Event, StoredEvent


class Projection(Protocol):
    """A read model folded from the journal."""

    name: str
    version: int
    tables: tuple[str, ...]
    """The tables it owns (dropped on a version bump; compared by ``reel replay``)."""
    ddl: str
    kinds: frozenset[str] | None
    """Event kinds it handles; None means every event with a correlation id (the tape)."""

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        """Write the rows for one event (called inside the projector's transaction).

        A projection may also define ``flush(conn)`` (called at the end of each batch, inside
        its transaction, to write buffered rows), ``committed()`` (called once that transaction
        committed, before the projector's position moves: to publish what is now durable),
        ``reset()`` (called when a batch rolls back, to forget what it buffered or cached) and
        ``resume(reader, position, conn)`` (called when the projector opens views.db, with the
        position its tables hold: to rebuild state it keeps in memory by its own fold)."""
        ...


@contextmanager
def folded(projection: Projection, rows: Iterable[StoredEvent]) -> Iterator[apsw.Connection]:
    """``projection``'s tables folded from ``rows`` by its own ``apply``, in a database in
    memory: what a command reads of a journal no node serves (``reel approvals`` on a stopped
    node). One fold per view: an offline read never has a second one written beside it."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(projection.ddl)
        with conn:
            for stored in rows:
                projection.apply(conn, stored, stored.decode())
            flush = getattr(projection, "flush", None)
            if flush is not None:
                flush(conn)
        yield conn
    finally:
        conn.close()
