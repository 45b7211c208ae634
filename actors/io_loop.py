"""The node's asyncio loop, on its own thread: network I/O for actors, and timers.

Actors never await; they hand coroutines to :meth:`IoLoop.submit` and get results back as
messages. Timers (:meth:`IoLoop.call_later`) deliver ticks the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Timer:
    """A scheduled callback that can be cancelled from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self._cancelled = False

    def _set(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle
        if self._cancelled:
            handle.cancel()

    def cancel(self) -> None:
        """Cancel if not yet fired; idempotent."""
        self._cancelled = True
        handle = self._handle
        if handle is not None:
            self._loop.call_soon_threadsafe(handle.cancel)


class IoLoop:
    """An asyncio event loop running forever on a daemon thread."""

    def __init__(self, name: str = "reel-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coro`` on the loop; cancelling the returned future cancels the task."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback`` on the loop thread after ``delay`` seconds."""
        timer = Timer(self.loop)
        self.loop.call_soon_threadsafe(lambda: timer._set(self.loop.call_later(delay, callback)))
        return timer

    def stop(self) -> None:
        """Cancel pending tasks and stop the loop; idempotent."""
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
