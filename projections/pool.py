"""Pooled read-only connections to views.db, shared by every typed view reader.

The projector alone writes views.db; readers (the HTTP and gRPC transports, the watchdog, runs
reading memory or learnings) each borrow a read-only connection for one query and hand it
back, so many threads read at once without opening a connection per query.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import apsw

BUSY_TIMEOUT_MS = 5000
"""How long a read waits for the projector's write lock."""


class PooledReader:
    """Base of the view readers: ``_borrow()`` a connection, ``close()`` them all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._idle: queue.SimpleQueue[apsw.Connection] = queue.SimpleQueue()
        self._all: list[apsw.Connection] = []
        self._guard = threading.Lock()

    def _connect(self) -> apsw.Connection:
        """A new read-only connection (subclasses add extensions or functions)."""
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        return conn

    @contextmanager
    def _borrow(self) -> Iterator[apsw.Connection]:
        """A pooled read-only connection for one query."""
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._connect()
            with self._guard:
                self._all.append(conn)
        try:
            yield conn
        finally:
            self._idle.put(conn)

    def close(self) -> None:
        with self._guard:
            for conn in self._all:
                conn.close()
            self._all.clear()
