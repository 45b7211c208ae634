"""The node's asyncio loop, on its own thread: network I/O for actors, and timers.

Actors never await; they hand coroutines to :meth:`IoLoop.submit` and get results back as
messages. Timers (:meth:`IoLoop.call_later`) deliver ticks the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Timer:
    """A scheduled callback that can be cancelled from any thread, without waking the loop.

    Cancelling is best effort, as with asyncio: a callback already due and handed to the loop
    still runs (receivers of ticks tell a stale one by a generation they keep)."""

    __slots__ = ("_timers", "callback", "cancelled", "deadline", "done")

    def __init__(self, timers: _Timers, deadline: float, callback: Callable[[], object]) -> None:
        self._timers = timers
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False
        self.done = False
        """Handed to the loop to run: too late to cancel."""

    def __lt__(self, other: Timer) -> bool:
        return self.deadline < other.deadline

    def cancel(self) -> None:
        """Cancel if not yet due; idempotent."""
        self._timers.cancel(self)


class _Timers:
    """The pending timers of one loop, kept here rather than on the loop.

    A run sets two timers that almost never fire (its wall clock, its tool call's limit) and
    cancels both: with asyncio's own timers each set and each cancel from an actor's thread
    wakes the loop (a write to its self-pipe, a turn of the loop, a thread switch), four times
    a run. Here the loop holds one alarm, at the earliest deadline: a timer due later than it
    is only pushed on a heap, and a cancel only marks it; the loop is woken only when a timer
    is due before its alarm. Cancelled timers are dropped when they reach the heap's top, or
    all at once when they are most of it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._heap: list[Timer] = []
        self._cancelled = 0
        self._armed_at = math.inf  # the alarm's deadline, or one a wake-up is on its way for
        self._alarm: asyncio.TimerHandle | None = None  # the loop thread's only

    def add(self, delay: float, callback: Callable[[], object]) -> Timer:
        timer = Timer(self, self.loop.time() + delay, callback)
        with self._lock:
            heapq.heappush(self._heap, timer)
            wake = timer.deadline < self._armed_at
            if wake:
                self._armed_at = timer.deadline
            if self._cancelled > COMPACT_AFTER and 2 * self._cancelled > len(self._heap):
                self._heap = [t for t in self._heap if not t.cancelled]
                heapq.heapify(self._heap)
                self._cancelled = 0
        if wake:
            self.loop.call_soon_threadsafe(self._rearm)
        return timer

    def cancel(self, timer: Timer) -> None:
        with self._lock:
            if not (timer.cancelled or timer.done):
                timer.cancelled = True
                self._cancelled += 1

    def _rearm(self) -> None:
        """On the loop: set the alarm for the earliest timer not cancelled."""
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        with self._lock:
            heap = self._heap
            while heap and heap[0].cancelled:
                heapq.heappop(heap)
                self._cancelled -= 1
            self._armed_at = heap[0].deadline if heap else math.inf
            if heap:
                self._alarm = self.loop.call_at(self._armed_at, self._fire)

    def _fire(self) -> None:
        """On the loop: hand every due timer's callback to the loop, then re-arm."""
        self._alarm = None
        due: list[Timer] = []
        now = self.loop.time()
        with self._lock:
            heap = self._heap
            while heap and heap[0].deadline <= now:
                timer = heapq.heappop(heap)
                if timer.cancelled:
                    self._cancelled -= 1
                else:
                    timer.done = True
                    due.append(timer)
        for timer in due:
            self.loop.call_soon(timer.callback)  # the loop's own handle logs what raises
        self._rearm()


COMPACT_AFTER = 256
"""Cancelled timers tolerated on the heap before they may be swept at once (when they are more
than half of it): a node cancels thousands of far timers a minute."""


class IoLoop:
    """An asyncio event loop running forever on a daemon thread."""

    def __init__(self, name: str = "reel-io") -> None:
        self.loop = asyncio.new_event_loop()
        self._timers = _Timers(self.loop)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Run ``coro`` on the loop; cancelling the returned future cancels the task."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback`` on the loop thread after ``delay`` seconds (from any thread)."""
        return self._timers.add(delay, callback)

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
