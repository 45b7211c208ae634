"""The projector: folds the journal into views.db, one checkpoint per projection.

Each batch is one transaction that writes the projections' rows *and* their checkpoints, so a
crash never leaves a view ahead of or behind its checkpoint. A projection whose stored version
differs from its code is dropped and rebuilt from position 0. The projector follows the journal
through its subscription (``JournalPort.listen``) on its own thread, and wakes its own listeners
(SSE, gRPC streams) after each batch.

Following starts on that thread too: whatever the views lack when the node starts (everything,
when views.db was deleted) is folded there while the node serves (:attr:`Projector.catching_up`).
Until that start-up catch-up ends, a wait for a position (:meth:`Projector.wait_for`) lasts as
long as it takes, whatever its time-out: a record written before the restart is found late,
never taken for missing.

It depends on the journal ports (:mod:`events.port`), not on the SQLite classes: folding needs
``head`` and ``read`` only, following needs ``listen``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import apsw

from events import JournalPort, JournalReadPort, StoredEvent, UnknownEventKind
from events.sqlite.schema import create_private
from projections.approvals_view import ApprovalsProjection
from projections.base import Projection
from projections.incidents import IncidentsProjection
from projections.learning import LearningProjection
from projections.memory.embedders import Embedder
from projections.memory.matrix import VectorMatrix
from projections.memory.view import MemoryProjection, load_vec
from projections.runs import RunsProjection
from projections.sessions import SessionsProjection
from projections.tape import TapeProjection
from projections.tasks import TasksProjection
from projections.tool_usage import ToolUsageProjection
from projections.usage import UsageProjection

VIEWS_APPLICATION_ID = 0x7265656D  # "reem": reel views

LINGER_S = 0.01
"""How long the following projector, woken by a commit, lets more commits gather before it
reads them. A batch has a cost of its own whatever it holds (the journal read, a views.db
transaction, the checkpoints' row, the listeners' wake-ups), and a run commits six times in a
few milliseconds: folded one commit at a time the views took a sequential run's CPU from 6 to
13 ms. Anyone waiting for the views cuts it short (:meth:`Projector.hurry`): a reader waiting
for its own write (:meth:`Projector.wait_for`, the HTTP reads) and a stream following them
(SSE, ``RunStream``, a channel's replies: :class:`projections.follow.Signal`). So it saves the
folding of what nobody watches, and costs a watcher nothing."""


def all_projections(
    embedder: Embedder | None = None, matrix: VectorMatrix | None = None
) -> list[Projection]:
    """A fresh instance of every projection reel maintains; the memory view indexes with
    ``embedder`` (the hashing embedder when ``None``) and keeps ``matrix`` (a
    :class:`projections.memory.search.MemoryView`'s) current."""
    return [
        SessionsProjection(),
        RunsProjection(),
        TapeProjection(),
        ApprovalsProjection(),
        ToolUsageProjection(),
        MemoryProjection(embedder, matrix),
        TasksProjection(),
        LearningProjection(),
        IncidentsProjection(),
        UsageProjection(),
    ]


Progress = Callable[[int, int], None]


def _hooks(projections: Sequence[Projection], name: str) -> list[Callable[..., None]]:
    """The ``name`` method of each projection that has one."""
    return [h for p in projections if (h := getattr(p, name, None)) is not None]


class Projector:
    """Owns views.db for writing; readers open their own connections (WAL)."""

    def __init__(
        self,
        reader: JournalReadPort,
        path: Path,
        projections: Sequence[Projection] | None = None,
        batch: int = 5000,
        durable: bool = True,
    ) -> None:
        self.reader = reader
        self.path = path
        self.projections = list(projections or all_projections())
        self.batch = batch
        create_private(path)  # 0600, and so its -wal and -shm files
        self.conn = apsw.Connection(str(path))
        self.conn.set_busy_timeout(5000)
        load_vec(self.conn)  # the memory view's vector index is a sqlite-vec table
        self.conn.execute("PRAGMA journal_mode=WAL")
        # Views are rebuildable from the journal; a scratch rebuild need not survive a power cut.
        self.conn.execute(f"PRAGMA synchronous={'NORMAL' if durable else 'OFF'}")
        self._routes: dict[tuple[str, bool], list[Projection]] = {}
        # The optional hooks (Projection.apply's docstring), looked up once, not per batch.
        self._flushes: list[Callable[[apsw.Connection], None]] = _hooks(self.projections, "flush")
        self._commits: list[Callable[[], None]] = _hooks(self.projections, "committed")
        self._checkpoints = self._prepare()
        self._names = tuple(self._checkpoints)
        self._move_checkpoints = (
            "UPDATE projection_checkpoints SET position = ? WHERE position < ?"
            f" AND name IN ({', '.join('?' * len(self._names))})"
        )
        for projection in self.projections:
            resume = getattr(projection, "resume", None)
            if resume is not None:
                resume(reader, self._checkpoints[projection.name], self.conn)
        self._cond = threading.Condition()
        self._listeners: list[Callable[[int], None]] = []
        self._wake = threading.Event()
        self._hurry = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.error: BaseException | None = None
        self._closed = False
        self.catch_up_target = 0
        """The journal head when following began: the start-up catch-up ends there."""
        self._catching_up = False
        self._following = False

    # --- schema and checkpoints --------------------------------------------------------------

    def _prepare(self) -> dict[str, int]:
        with self.conn:
            self.conn.execute(f"PRAGMA application_id={VIEWS_APPLICATION_ID}")
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS projection_checkpoints("
                " name TEXT PRIMARY KEY, version INTEGER NOT NULL, position INTEGER NOT NULL)"
            )
            stored = {
                str(name): (int(version), int(position))
                for name, version, position in self.conn.execute(
                    "SELECT name, version, position FROM projection_checkpoints"
                )
            }
            checkpoints: dict[str, int] = {}
            for projection in self.projections:
                version, position = stored.get(projection.name, (None, 0))
                if version != projection.version:
                    for table in projection.tables:
                        self.conn.execute(f"DROP TABLE IF EXISTS {table}")
                    position = 0
                self.conn.execute(projection.ddl)
                self.conn.execute(
                    "INSERT OR REPLACE INTO projection_checkpoints VALUES (?,?,?)",
                    (projection.name, projection.version, position),
                )
                checkpoints[projection.name] = position
        return checkpoints

    @property
    def position(self) -> int:
        """The journal position every projection has applied."""
        return min(self._checkpoints.values()) if self._checkpoints else 0

    def checkpoints(self) -> dict[str, int]:
        """Each projection's last applied position."""
        return dict(self._checkpoints)

    # --- folding -----------------------------------------------------------------------------

    @property
    def catching_up(self) -> bool:
        """True from :meth:`follow` until the views include the head the journal had then
        (or the projector failed or closed): the node serves meanwhile."""
        return self._catching_up

    def catch_up(self, until: int | None = None, progress: Progress | None = None) -> int:
        """Apply every committed event (up to ``until``); returns how many were read. Stops
        between two batches once :meth:`close` began (the rest is applied at the next start).

        Without ``until`` (nor ``progress``) it reads pages until a short one rather than
        asking the journal its head first: one read per wake where there were two, which on
        PostgreSQL is a round trip and a statement each."""
        total = 0
        target = until
        if target is None and progress is not None:  # progress is shown against the head
            target = self.reader.head().position
        while not self._stop.is_set() or not self._following:
            start = self.position
            if target is not None and start >= target:
                break
            limit = self.batch if target is None else min(self.batch, target - start)
            events = self.reader.read(after_position=start, limit=limit)
            if not events:
                break
            try:
                self._apply_batch(events)
            except BaseException:
                for projection in self.projections:
                    reset = getattr(projection, "reset", None)
                    if reset is not None:
                        reset()
                raise
            last = events[-1].position
            for projection in self.projections:
                self._checkpoints[projection.name] = max(self._checkpoints[projection.name], last)
            total += len(events)
            self._notify(last)
            if progress is not None and target is not None:
                progress(last, target)
            if target is None and len(events) < limit:
                break  # a short page: everything committed is read (no head() per wake)
        return total

    def _handlers(self, kind: str, correlated: bool) -> list[Projection]:
        """The projections that fold events of ``kind`` (cached per kind)."""
        key = (kind, correlated)
        handlers = self._routes.get(key)
        if handlers is None:
            handlers = [
                p for p in self.projections if (correlated if p.kinds is None else kind in p.kinds)
            ]
            self._routes[key] = handlers
        return handlers

    def _apply_batch(self, events: list[StoredEvent]) -> None:
        """Fold one batch and move the checkpoints, all in one transaction."""
        conn = self.conn
        checkpoints = self._checkpoints
        behind = min(checkpoints.values(), default=0)
        level = behind == max(checkpoints.values(), default=0)
        with conn:
            for stored in events:
                handlers = self._handlers(stored.kind, stored.correlation_id is not None)
                if not handlers:
                    continue
                try:
                    event = stored.decode()
                except UnknownEventKind:
                    continue  # verify reports it; views skip what they cannot read
                for projection in handlers:
                    # After a version bump one projection is behind the others.
                    if level or stored.position > checkpoints[projection.name]:
                        projection.apply(conn, stored, event)
            for flush in self._flushes:
                flush(self.conn)
            last = events[-1].position
            # One statement for every view behind ``last``: a view more costs a batch a row,
            # not a statement.
            self.conn.execute(self._move_checkpoints, (last, last, *self._names))
        for committed in self._commits:
            committed()

    # --- following the journal ---------------------------------------------------------------

    def follow(self, journal: JournalPort) -> None:
        """Keep up with the journal on a background thread, beginning with whatever the views
        lack (:attr:`catching_up` until they include today's head); returns at once."""
        self.catch_up_target = self.reader.head().position
        self._catching_up = self.position < self.catch_up_target
        self._following = True
        self._unsubscribe = journal.listen(lambda _head: self._wake.set())
        self._thread = threading.Thread(target=self._run, name="projector", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.catch_up()
                self.error = None  # what stopped it (a journal database restarting) is over
            except Exception as exc:
                self.error = exc
            if self._catching_up and (
                self.position >= self.catch_up_target or self.error is not None
            ):
                self._caught_up()
            self._wake.wait(timeout=0.5)
            self._wake.clear()
            if not self._catching_up:  # let the burst gather, unless a reader waits (LINGER_S)
                self._hurry.wait(LINGER_S)
                self._hurry.clear()
        self._caught_up()

    def _caught_up(self) -> None:
        with self._cond:
            self._catching_up = False
            self._cond.notify_all()

    def wait_for(self, position: int, timeout: float | None = None) -> int:
        """Block until the views include ``position`` (or ``timeout``, which is not counted
        while the start-up catch-up lasts); returns the view position."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.position < position:
            self.hurry()
        with self._cond:
            while self.position < position and not self._stop.is_set():
                if self._catching_up:
                    deadline = None if timeout is None else time.monotonic() + timeout
                    self._cond.wait()
                    continue
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            return self.position

    def hurry(self) -> None:
        """Someone waits for the views (a position, the next batch): the next commit is read
        without lingering. Any thread."""
        self._hurry.set()

    def wait_caught_up(self) -> None:
        """Return once the start-up catch-up ended (at once when there is none, or it failed:
        then :attr:`error` says why)."""
        self.wait_for(self.catch_up_target, 0)

    def listen(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call ``listener(position)`` after each applied batch; returns an unsubscribe."""
        with self._cond:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._cond:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def _notify(self, position: int) -> None:
        with self._cond:
            self._cond.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):
                listener(position)

    def close(self, *, final_catch_up: bool = False) -> None:
        """Stop following (then, if asked, apply what is still unapplied: not while the
        start-up catch-up was still going, which the next start takes up where it stopped)
        and close views.db. Idempotent."""
        behind = self._catching_up
        self._stop.set()
        self._wake.set()
        self._hurry.set()
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        self._following = False
        if final_catch_up and not behind and not self._closed:
            self.catch_up()
        with self._cond:
            self._cond.notify_all()
        if not self._closed:
            self._closed = True
            self.conn.close()
