"""Waking asyncio streams when another thread makes progress.

The projector (and the journal) report progress from their own threads; streams on the node's
I/O loop wait for "something changed since I last looked". A :class:`ChangeHub` turns the
thread callback into one future per generation: a waiter takes :meth:`changed` *before*
reading, so a change that lands between its read and its wait is never missed.
"""

from __future__ import annotations

import asyncio
import contextlib


class ChangeHub:
    """One shared wake-up signal, notified from any thread, awaited on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future: asyncio.Future[int] | None = None
        self.position = 0
        """The last position reported."""

    def notify(self, position: int) -> None:
        """Report progress (any thread; returns at once)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._wake, position)

    def _wake(self, position: int) -> None:
        self.position = max(self.position, position)
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(position)

    def changed(self) -> asyncio.Future[int]:
        """A future resolved by the next notification (loop thread only)."""
        if self._future is None or self._future.done():
            self._future = self._loop.create_future()
        return self._future


async def wait_any(*waits: asyncio.Future[object] | asyncio.Task[object]) -> None:
    """Wait until one of ``waits`` is done, without cancelling shared futures."""
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
