"""Following: page through something that grows (a run's tape, the journal) and wake when it
grows. The one implementation behind SSE, gRPC ``RunStream``, ``Approvals.Watch``,
``Journal.Read(follow)`` and ``reel chat``.

A :class:`Signal` turns "the projector applied a batch" or "the journal committed" (reported on
those components' own threads) into one asyncio future per generation. :func:`pages` reads a
page after a cursor, hands it out, and when the page was not full waits for the signal: a waiter
takes :meth:`Signal.changed` *before* it reads, so a change landing between its read and its
wait is never missed. Every follower of one server shares one signal (no thread, subscription
or poll per follower), and reads are plain indexed queries on the caller's loop thread, so 500
followers cost 500 small queries per change, not 500 queued worker threads.

:func:`follow_tape` is the tape's use: it ends after the run's terminal entry (or at once when a
follower resumes after it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from events.lifecycle import TERMINAL_STATUSES, is_terminal
from projections.queries import Views

T = TypeVar("T")
C = TypeVar("C")

TAPE_PAGE = 500
"""Tape entries read per query."""


class Signal:
    """One shared wake-up signal, notified from any thread, awaited on ``loop``.

    ``hurry`` is called whenever a follower is about to wait (the projector's
    :meth:`~projections.Projector.hurry` for a signal of its batches): while someone follows,
    the views are read as each commit lands rather than after the projector's linger."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, hurry: Callable[[], None] | None = None
    ) -> None:
        self._loop = loop
        self._hurry = hurry
        self._future: asyncio.Future[int] | None = None
        self.position = 0
        """The last position reported."""

    def notify(self, position: int) -> None:
        """Report progress (any thread; returns at once). Fits ``Journal.listen`` and
        ``Projector.listen``."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._wake, position)

    def _wake(self, position: int) -> None:
        self.position = max(self.position, position)
        future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(position)

    def changed(self) -> asyncio.Future[int]:
        """A future resolved by the next notification (loop thread only)."""
        if self._hurry is not None:
            self._hurry()
        if self._future is None or self._future.done():
            self._future = self._loop.create_future()
        return self._future


async def wait_any(*waits: Awaitable[object]) -> None:
    """Wait until one of ``waits`` is done, without cancelling the shared futures."""
    await asyncio.wait([asyncio.ensure_future(w) for w in waits], return_when="FIRST_COMPLETED")


FIRST_PAGE = 1
"""The first page's size; pages grow fourfold up to the full size. A follower's first entry goes
out in the first turn even when hundreds start together on a long backlog: with a first page of
16, 500 followers of a 130-entry backlog had their first entries after 4-8 s instead of 1.5 s, as
this process's own clients waited behind everyone's pages (``bench/followers.py``). Growing
fourfold keeps a short tape's replay to a few reads."""


async def pages(
    read: Callable[[C, int], Sequence[T]],
    cursor: C,
    advance: Callable[[T], C],
    signal: Signal,
    page_size: int,
    wake: Callable[[], Iterable[Awaitable[object]]] = tuple,
) -> AsyncIterator[Sequence[T]]:
    """Pages after ``cursor``, forever: ``read(cursor, limit)`` is handed out (empty pages
    too, after a wake); a page shorter than asked for is followed by a wait for ``signal`` or
    any of ``wake()`` (a caller's own events: a command on the stream, a shutdown). Page sizes
    grow from :data:`FIRST_PAGE` to ``page_size``; between full pages other followers take
    their turn. The caller stops by leaving the loop."""
    size = min(FIRST_PAGE, page_size)
    while True:
        changed = signal.changed()
        page = read(cursor, size)
        if page:
            cursor = advance(page[-1])
        yield page
        if len(page) < size:
            await wait_any(changed, *wake())
        else:
            size = min(size * 4, page_size)
            await asyncio.sleep(0)  # let the other followers send theirs


class _TapeEntry(Protocol):
    @property
    def tape_seq(self) -> int: ...
    @property
    def kind(self) -> str: ...


E = TypeVar("E", bound=_TapeEntry)


async def follow_tape(
    views: Views,
    run_id: str,
    after_seq: int,
    signal: Signal,
    read: Callable[[str, int, int], Sequence[E]],
    wake: Callable[[], Iterable[Awaitable[object]]] = tuple,
) -> AsyncGenerator[Sequence[E], None]:
    """The run's tape entries after ``after_seq``, page by page (``read`` is ``Views.tape`` or
    ``Views.tape_raw``), ending after the run's terminal entry. Empty pages come out after a
    wake so the caller can act on its own ``wake`` sources."""

    ended = False

    def page(after: int, limit: int) -> Sequence[E]:
        nonlocal ended
        # The state first: when it says ended, the entries read after it include the end.
        ended = run_ended(views, run_id)
        return read(run_id, after, limit)

    async for entries in pages(page, after_seq, _seq, signal, TAPE_PAGE, wake):
        yield entries
        if entries and is_terminal(entries[-1].kind):
            return
        if not entries and ended:  # resumed after the end: nothing more will come
            return


def run_ended(views: Views, run_id: str) -> bool:
    run = views.run(run_id)
    return run is not None and run.state in TERMINAL_STATUSES


def _seq(entry: _TapeEntry) -> int:
    return entry.tape_seq
