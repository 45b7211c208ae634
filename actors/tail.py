"""Node-wide caches kept current from the journal: a :class:`Tail` folds the records of some
kinds into a cache from the last position it folded, on demand (:meth:`Tail.sync`) and, once
told to (:meth:`Tail.follow`), on a thread of its own as the journal commits.

Two caches are read on every request or tool call and changed by rare records: the token book
(``token.*``, :mod:`transports.access.tokens`) and the ``always`` grants
(``tool.approval_resolved`` and ``grant.revoked``, :mod:`actors.approvals.always_grants`).
Folded once at start and changed only by the node's own commands, a token revoked or a grant
ended through another writer of the journal (another node on the same PostgreSQL) would stay in
force here. So the journal is the one way either changes: the tail reads
``events_of_kinds(kinds, after_position)`` (the kind index: it costs what it returns, never a
pass over run records) and folds each record with the cache's own fold.

The contract (docs/scale-out.md, "Caches"):

- **This node's own writes**: a command that appended a record the cache folds calls
  :meth:`Tail.sync` before it replies. The record (and everything committed before it) is
  folded when ``sync`` returns, on the caller's thread: it waits for nobody but a sync already
  under way, at most :data:`SYNC_WAIT_S` (then :class:`events.JournalUnavailable`).
- **Other writers**: a record committed elsewhere is folded once this node's journal reports a
  commit past it (``JournalPort.wait_for``: on SQLite at the commit; on PostgreSQL when this
  node's journal sees the position), plus at most :data:`PAUSE_S` and one read.
- **Cost**: the follower waits in ``wait_for`` (no polling, no callback per commit) and reads
  at most once per :data:`PAUSE_S`; when it comes back from its pause under load the head has
  moved and ``wait_for`` returns without waiting, so no commit wakes it: a busy node pays at
  most one indexed read per cache per pause, an idle one nothing.

The follower ends when the journal closes (``wait_for`` returns without a new commit, or the
read raises :class:`events.JournalClosed`): there is nothing to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from actors.stream import Recorded
from events import AppendResult, JournalClosed, JournalPort, JournalReadPort, JournalUnavailable

log = logging.getLogger(__name__)

PAUSE_S = 0.05
"""The follower reads at most once per this long: the added lag for another writer's record."""

SYNC_WAIT_S = 10.0
"""The longest :meth:`Tail.sync` waits for a sync already under way (a read of a journal
database that stopped answering) before it gives up."""

RETRY_S = 1.0
"""After a failed read, the follower tries again this much later."""


class Tail:
    """The records of ``kinds`` after :attr:`position`, folded into a cache by ``fold``.

    ``fold`` is the cache's own fold (one record at a time, in journal order, never raising);
    :attr:`position` starts at 0, so the first :meth:`sync` loads the cache."""

    def __init__(
        self,
        reader: JournalReadPort,
        kinds: tuple[str, ...],
        fold: Callable[[Recorded], None],
        name: str,
    ) -> None:
        self.reader = reader
        self.kinds = kinds
        self.name = name
        """What the cache is, for logs and errors (``token book``, ``always grants``)."""
        self._fold = fold
        self.position = 0
        """The position of the last record folded: every record of ``kinds`` up to it is in
        the cache."""
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def sync(self) -> int:
        """Fold every record of ``kinds`` committed by now; returns how many were folded.

        Raises what the read raises (a :class:`events.JournalError`), or
        :class:`events.JournalUnavailable` when another sync held the tail for
        :data:`SYNC_WAIT_S`."""
        return self._catch_up(None, "")

    def written(self, result: AppendResult, principal: str) -> int:
        """:meth:`sync`, the writer's own append ``result`` folded as it wrote it (by
        ``principal``: the live fold, not its rows read back). Raises as :meth:`sync`."""
        return self._catch_up(result, principal)

    def _catch_up(self, result: AppendResult | None, principal: str) -> int:
        if not self._lock.acquire(timeout=SYNC_WAIT_S):
            raise JournalUnavailable(
                f"the {self.name} could not be brought up to date with the journal within "
                f"{SYNC_WAIT_S:g} s"
            )
        try:
            rows = self.reader.events_of_kinds(self.kinds, after_position=self.position)
            for row in rows:
                at = -1 if result is None or result.duplicate else row.position
                if result is not None and result.first_position <= at <= result.last_position:
                    event = result.events[at - result.first_position]
                    self._fold(Recorded(event, result.stream, result.recorded_at_ms, principal))
                else:
                    self._fold(Recorded.of(row))
                self.position = row.position
            return len(rows)
        finally:
            self._lock.release()

    def follow(self, journal: JournalPort) -> None:
        """Keep folding on a daemon thread as ``journal`` commits, until it closes (it must be
        what :attr:`reader` reads). Idempotent."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(journal,), name=f"tail-{self.name}", daemon=True
            )
            self._thread.start()

    def _run(self, journal: JournalPort) -> None:
        failing = False
        while True:
            head = journal.committed_position
            try:
                self.sync()  # everything committed up to ``head`` at least
            except JournalClosed:
                return
            except Exception as exc:  # a database restarting: the same read again soon
                if not failing:
                    log.warning("the %s waits for the journal: %s", self.name, exc)
                failing = True
                time.sleep(RETRY_S)
                continue
            if failing:
                log.info("the %s follows the journal again", self.name)
                failing = False
            time.sleep(PAUSE_S)
            if journal.wait_for(head) <= head:
                return  # closed: wait_for returned without a commit past ``head``
