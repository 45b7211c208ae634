"""Actor threads kept for the next actor: :class:`PooledActor`, the base of every reel actor.

pykka's ``ThreadingActor`` starts a thread for each actor and lets it end with the actor. A run
starts two (its own and its tool call's), and starting a thread is slower than handing work to
one that waits: ~170 us on a quiet 2-core machine against ~60 us for a hand-off, and up to a
millisecond under load, on the run's critical path each time (the starter waits until the new
thread runs). A :class:`PooledActor` runs its message loop on a thread of one process-wide
pool instead: a thread whose actor stopped waits for the next actor's loop, and the pool keeps
at most :data:`IDLE_KEEP` of them waiting, so a node's thread count still follows its live
actors (a burst's threads end with it).

The contract is pykka's: one thread runs an actor's loop from ``on_start`` to its stop, and
nothing else meanwhile; its inbox is a ``queue.SimpleQueue`` (what pykka asks of an inbox: put,
get, empty). What a fresh thread would give the loop, a reused one gives too: the
loop runs in an empty :mod:`contextvars` context, and the thread carries the actor's name (as
pykka names it, ``RunActor-12``) while it runs it, ``actor-idle`` while it waits. Every reel
actor ran on a daemon thread, and pool threads are daemons. reel keeps nothing in
``threading.local`` across an actor's messages (the views pool's holder mark is cleared by the
``with`` that set it).
"""

from __future__ import annotations

import contextvars
import itertools
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pykka

if TYPE_CHECKING:
    from pykka._actor import ActorInbox
    from pykka._envelope import Envelope

IDLE_KEEP = 4
"""Threads kept waiting for an actor at most: a sequential run needs two at once (the run's and
its tool's) and a session waking meanwhile a third; a thread that ends an actor's loop beyond
this many waiting ends too."""

_names = itertools.count()
_Job = tuple[str, Callable[[], None]]


class _ActorThreads:
    """The threads that run actors' loops, and the ones among them waiting for one."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []

    def run(self, name: str, loop: Callable[[], None]) -> None:
        """Run ``loop`` on a waiting thread, or on a new one if none waits."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is not None:
            inbox.put((name, loop))
            return
        inbox = queue.SimpleQueue()
        inbox.put((name, loop))
        threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()

    def idle(self) -> int:
        """How many threads wait for an actor now."""
        with self._lock:
            return len(self._idle)

    def _serve(self, inbox: queue.SimpleQueue[_Job]) -> None:
        me = threading.current_thread()
        while True:
            me.name, loop = inbox.get()
            # A fresh thread starts in an empty context; so does every loop on this one.
            contextvars.Context().run(loop)
            me.name = "actor-idle"
            with self._lock:
                if len(self._idle) >= self.keep:
                    return
                self._idle.append(inbox)


_THREADS = _ActorThreads(IDLE_KEEP)


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: none of them waits for its actors."""
    global _THREADS
    _THREADS = _ActorThreads(IDLE_KEEP)


os.register_at_fork(after_in_child=_forget_after_fork)


def idle_actor_threads() -> int:
    """Threads waiting for an actor's loop (what a thread count may hold beyond live actors)."""
    return _THREADS.idle()


class PooledActor(pykka.ThreadingActor):
    """A pykka threading actor whose loop runs on a kept thread (see the module)."""

    use_daemon_thread = True

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        # Every message passes through it: the C queue takes a lock where ``queue.Queue``
        # takes a lock and notifies a ``Condition`` in Python, on both sides of each hand-off.
        inbox: queue.SimpleQueue[Envelope[Any]] = queue.SimpleQueue()
        return inbox

    def _start_actor_loop(self) -> None:
        _THREADS.run(f"{type(self).__name__}-{next(_names)}", self._actor_loop)
