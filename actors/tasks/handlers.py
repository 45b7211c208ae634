"""Task handlers: the registry ``kind -> handler(payload, context) -> result``, the context a
handler runs with, and the built-in ``noop``.

A handler is a plain synchronous function run on a task worker's thread::

    def reflect(payload: Any, context: TaskContext) -> Any:
        for step in work(payload):
            context.check()          # raises TaskInterrupted once cancelled / past the deadline
            ...
        return {"candidates": 3}     # JSON; recorded (redacted) as task.succeeded's result

    node.tasks.register("post_run_reflection", reflect, timeout_s=60)

What a handler must know (docs/tasks.md, "Writing a handler"):

* **Idempotent-friendly.** A task runs again only if its claim lapsed: the worker (its node)
  stopped or was killed without recording an outcome, and the task is reclaimed once the
  lease ends. Anything the handler did before that happened may have happened; write effects
  as events with an id derived from the task (``task_id``, ``attempt``) or check before acting.
* **Exactly one success is recorded.** The outcome is appended at the seq the worker's fold
  expects; if anything else was appended meanwhile (a cancel, a reclaim) the append is
  refused and the result dropped. So a lapsed attempt that finishes late cannot record a
  second success.
* **Cooperative cancellation.** Cancelling a running task records ``task.cancelled`` at once
  and sets ``context.cancelled``; the handler should look at it (``check()``, ``wait()``)
  and return. Its return value is then dropped. The same flag is set when the node stops or
  when the handler's deadline (``timeout_s``) passes (then the attempt fails ``timeout``).
* **Payload as stored.** The handler receives the payload as the journal holds it, redacted:
  never pass a secret through a task.
* **Failures.** Raising fails the attempt (retried with backoff while attempts are left);
  raising :class:`PermanentFailure` fails the task at once (a bad payload: retrying cannot
  help).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from events.catalog import TASK_KIND

Interruption = Literal["cancelled", "stopping", "timeout", "lost"]
"""Why a context's flag is set: an operator cancelled the task, the node is stopping, the
deadline passed, or the claim was lost (reclaimed elsewhere after this worker's lease lapsed)."""


class TaskInterrupted(Exception):
    """Raised by :meth:`TaskContext.check` once the task should stop; ``why`` says why."""

    def __init__(self, why: Interruption) -> None:
        super().__init__(f"task interrupted: {why}")
        self.why: Interruption = why


class PermanentFailure(Exception):
    """Raised by a handler to fail its task at once, without another attempt."""


class TaskContext:
    """What a running handler may ask: which task and attempt, whether to stop, how long is
    left. Thread-safe: the dispatcher sets the flag from another thread."""

    def __init__(
        self,
        *,
        task_id: str,
        kind: str,
        attempt: int,
        max_attempts: int,
        principal: str,
        timeout_s: float | None,
    ) -> None:
        self.task_id = task_id
        self.kind = kind
        self.attempt = attempt
        """This attempt's number, from 1."""
        self.max_attempts = max_attempts
        self.principal = principal
        """Who enqueued the task."""
        self.started = time.monotonic()
        self.deadline = None if timeout_s is None else self.started + timeout_s
        """``time.monotonic()`` past which the attempt fails ``timeout`` (None: no deadline)."""
        self._flag = threading.Event()
        self._why: Interruption | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the handler should stop now (cancelled, stopping, past its deadline)."""
        self._check_deadline()
        return self._flag.is_set()

    def _check_deadline(self) -> None:
        deadline = self.deadline
        if deadline is not None and not self._flag.is_set() and time.monotonic() >= deadline:
            self.interrupt("timeout")

    @property
    def why(self) -> Interruption | None:
        """Why the flag is set (the first reason wins), or None."""
        return self._why

    @property
    def remaining_s(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0.0)

    def interrupt(self, why: Interruption) -> None:
        """Set the flag (idempotent: the first reason is kept)."""
        if self._why is None:
            self._why = why
        self._flag.set()

    def check(self) -> None:
        """Raise :class:`TaskInterrupted` once the flag is set (or the deadline passed)."""
        if self.cancelled:
            raise TaskInterrupted(self._why or "cancelled")

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking early when the flag is set or at the deadline; True
        if the handler should stop."""
        remaining = self.remaining_s
        limit = max(seconds, 0.0) if remaining is None else min(max(seconds, 0.0), remaining)
        self._flag.wait(limit)
        return self.cancelled


Handler = Callable[[Any, TaskContext], Any]
"""``handler(payload, context) -> result``: run on a worker's thread; the result must encode
as JSON."""


class HandlerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A registered kind."""

    kind: str
    handler: Handler
    timeout_s: float | None = None
    """Each attempt's deadline (None: none; the handler still sees cancellation)."""
    description: str = ""


def _not_checked(_kind: str) -> bool:
    return False


class HandlerRegistry:
    """Which handler runs which kind. Register before the node starts: a task whose kind has
    no handler when a worker takes it fails at once with ``unknown_kind``."""

    def __init__(self) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        self._lock = threading.Lock()

    def register(
        self,
        kind: str,
        handler: Handler,
        *,
        timeout_s: float | None = None,
        description: str = "",
        replace: bool = False,
    ) -> HandlerSpec:
        """Register ``handler`` for ``kind``. Raises ``ValueError`` for a kind that does not
        match the task kind pattern, a timeout that is not positive, or a kind already
        registered (unless ``replace``).

        A kind shaped like a secret is refused where it would be stored, at enqueue
        (:func:`actors.tasks.store.enqueue`): checking here would compile the redaction
        detectors (a third of a second or more) on the node's way to its ready line, for kinds
        reel's own code names."""
        problem = TASK_KIND.problem(kind, _not_checked)
        if problem is not None:
            raise ValueError(f"task kind {problem}")
        if timeout_s is not None and not timeout_s > 0:
            raise ValueError("timeout_s must be positive")
        spec = HandlerSpec(kind=kind, handler=handler, timeout_s=timeout_s, description=description)
        with self._lock:
            if kind in self._specs and not replace:
                raise ValueError(f"a handler for task kind {kind!r} is already registered")
            self._specs[kind] = spec
        return spec

    def get(self, kind: str) -> HandlerSpec | None:
        return self._specs.get(kind)

    def kinds(self) -> tuple[str, ...]:
        """The registered kinds, sorted."""
        return tuple(sorted(self._specs))


def noop(payload: Any, context: TaskContext) -> Any:
    """The built-in ``noop``: does nothing and returns ``{"ok": true}``. With a payload
    ``{"sleep_s": N}`` it first waits N seconds (stopping early when cancelled): what tests,
    benchmarks and operators use to see the queue work."""
    if isinstance(payload, dict):
        sleep_s = payload.get("sleep_s")
        if isinstance(sleep_s, int | float) and sleep_s > 0:
            context.wait(float(sleep_s))
            context.check()
    return {"ok": True}


def unknown_kind(kind: str, known: tuple[str, ...]) -> str:
    """The failure text of a task whose kind has no handler."""
    return f"no handler is registered for task kind {kind!r} (known: {', '.join(known) or 'none'})"
