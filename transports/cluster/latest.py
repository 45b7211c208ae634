"""The last position committed on any node of a cluster, asked of the database.

A cluster node learns other nodes' commits by polling (the journal's follower): a read that
finds nothing may be looking for a row another node committed a moment ago (a session made
through it), so it asks the database once before answering "not found". The asks run on one
thread of their own, at most one running and one waiting (a read shares the waiting one: it
starts after the read missed), so a database that does not answer (away, the pool waiting to
connect) never holds more than that thread, and each read stops waiting after its timeout and
answers from the views, as every read does while the database is away.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from events import JournalError, JournalReadPort


class LatestCommit:
    """Asks ``journal`` for its head position (:meth:`position`); :meth:`close` at stop."""

    def __init__(self, journal: JournalReadPort) -> None:
        self._journal = journal
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="reel-latest-commit")
        self._lock = threading.Lock()
        self._waiting: Future[int] | None = None

    async def position(self, timeout: float) -> int | None:
        """The database's last committed position, asked after this call began; None when it
        did not answer within ``timeout`` seconds (or failed)."""
        with self._lock:
            ask = self._waiting
            if ask is None or ask.running() or ask.done():
                try:
                    ask = self._waiting = self._thread.submit(self._head)
                except RuntimeError:  # closed: the node is stopping
                    return None
        try:
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(ask)), timeout)
        except (JournalError, TimeoutError):
            return None

    def _head(self) -> int:
        return self._journal.head().position

    def close(self) -> None:
        """Stop asking (an ask in progress ends on its own)."""
        self._thread.shutdown(wait=False, cancel_futures=True)
