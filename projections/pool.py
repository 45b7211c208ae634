"""Pooled read-only connections to views.db, shared by every typed view reader.

The projector alone writes views.db; readers (the HTTP and gRPC transports, the watchdog, runs
reading memory or learnings) each borrow a read-only connection for one query and hand it
back, so many threads read at once without opening a connection per query.

A pool is bounded (:class:`ReaderLimits`, ``[views]`` in config.toml): a borrower finding every
connection lent out waits for one to come back, so a burst of concurrent runs costs at most
``readers`` file handles per reader rather than one per thread for the life of the node; a
connection left unused for ``idle_close_s`` is closed when the next one is handed back. A
thread that borrows again while it holds one (a view method calling another) gets a second
connection at once, even past the limit (closed when handed back), so nesting cannot deadlock a
full pool.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import apsw
import msgspec

BUSY_TIMEOUT_MS = 5000
"""How long a read waits for the projector's write lock."""


class ReaderLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How many read connections one view reader keeps, and for how long (``[views]``)."""

    readers: Annotated[int, msgspec.Meta(ge=1, le=256)] = 6
    """Connections one reader opens at most; a borrower beyond them waits for one to come back.
    The default is the size of asyncio's default executor on a 2-core machine (``cpu + 4``),
    the threads the transports read on."""
    idle_close_s: Annotated[float, msgspec.Meta(ge=0.0)] = 60.0
    """A connection unused for this long is closed when the next one is handed back (0: as
    soon as it is handed back itself)."""


class PooledReader:
    """Base of the view readers: ``_borrow()`` a connection, ``close()`` them all."""

    def __init__(self, path: Path, limits: ReaderLimits | None = None) -> None:
        self.path = path
        self.limits = limits or ReaderLimits()
        self._idle: list[tuple[apsw.Connection, float]] = []
        """Handed back, most recently used last (borrowed from the end, so the oldest age out)."""
        self._open = 0
        self._free = threading.Condition()
        self._held = threading.local()
        self._closed = False

    def _connect(self) -> apsw.Connection:
        """A new read-only connection (subclasses add extensions or functions)."""
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        return conn

    @property
    def connections(self) -> int:
        """Connections open now (lent out or idle)."""
        with self._free:
            return self._open

    @contextmanager
    def _borrow(self) -> Iterator[apsw.Connection]:
        """A pooled read-only connection for one query. A thread that already holds one (a
        view method calling another, inside its read transaction) gets a second one at once,
        beyond the limit if need be, so nesting can neither deadlock nor share a transaction."""
        depth: int = getattr(self._held, "depth", 0)
        conn = self._take(overflow=depth > 0)
        self._held.depth = depth + 1
        try:
            yield conn
        finally:
            self._held.depth = depth
            self._give_back(conn)

    def _take(self, *, overflow: bool) -> apsw.Connection:
        with self._free:
            while True:
                if self._idle:
                    return self._idle.pop()[0]
                if overflow or self._open < self.limits.readers:
                    self._open += 1
                    break
                self._free.wait()
        try:
            return self._connect()
        except BaseException:
            with self._free:
                self._open -= 1
                self._free.notify()
            raise

    def _give_back(self, conn: apsw.Connection) -> None:
        now = time.monotonic()
        stale: list[apsw.Connection] = []
        with self._free:
            if self._closed or self._open > self.limits.readers:  # closing, or a nested extra
                stale.append(conn)
                self._open -= 1
            else:
                self._idle.append((conn, now))
                cutoff = now - self.limits.idle_close_s
                while self._idle and self._idle[0][1] <= cutoff:
                    stale.append(self._idle.pop(0)[0])
                    self._open -= 1
            self._free.notify()
        for old in stale:
            old.close()

    def close(self) -> None:
        """Close every idle connection; one lent out is closed when it comes back."""
        with self._free:
            self._closed = True
            idle = [conn for conn, _ in self._idle]
            self._idle.clear()
            self._open -= len(idle)
            self._free.notify_all()
        for conn in idle:
            conn.close()
