"""One structured log line (JSON) per run state change, read from the journal after commits
(at most once per :data:`PAUSE_S`, only the rows of the run state kinds).

The line's ``ts`` is when the journal recorded the change, not when the line was written."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from actors.log_fields import fields
from events import JournalClosed, JournalPort, JournalUnavailable
from events.catalog import RunAccepted, kind_of
from events.errors import UNAVAILABLE_RETRY_S
from events.lifecycle import STATUS_OF_KIND, is_terminal
from transports.logs import timestamp

log = logging.getLogger("reel.runs")

ACCEPTED = kind_of(RunAccepted)
"""The one state line that names the session."""

PAUSE_S = 0.05
"""The logger reads at most once per this long (a line is up to that late): a busy node's
commits come faster, and one read each is a statement each on PostgreSQL."""

RUN_STATE_KINDS = tuple(sorted(STATUS_OF_KIND))
"""The kinds that change a run's state: what the logger reads."""


def log_run_state(line: dict[str, Any]) -> None:
    """Write one run state line (``RunStateLogger``'s default) to the ``reel.runs`` logger."""
    values = dict(line)
    log.info(values.pop("msg"), extra=fields(**values))


class RunStateLogger:
    """Follows the journal on its own thread and writes a line per run state change."""

    def __init__(
        self, journal: JournalPort, emit: Callable[[dict[str, Any]], None] = log_run_state
    ) -> None:
        self.journal = journal
        self.emit = emit
        """Takes each line as a dict: ``ts``, ``msg`` ("run state"), ``run_id``, ``state``, and
        ``session_id`` (accepted) or ``reason`` (terminal)."""
        self.position = journal.committed_position
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="run-state-log", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        # The journal's final checkpoint at shutdown is a commit too: it may wake this thread
        # just as the journal closes. Nothing after it is a run state: stop quietly.
        with contextlib.suppress(JournalClosed):
            self._follow()

    def _follow(self) -> None:
        while not self._stop.is_set():
            head = self.journal.wait_for(self.position, timeout=0.5)
            if head <= self.position:
                continue
            try:
                self._emit_until(head)
            except JournalUnavailable as exc:  # a database restarting: read again shortly
                log.warning("run states wait for the journal: %s", exc)
                self._stop.wait(UNAVAILABLE_RETRY_S)
                continue
            self._stop.wait(PAUSE_S)  # the commits of the pause are read together
        with contextlib.suppress(JournalUnavailable):  # what the last pause held back
            self._emit_until(self.journal.committed_position)

    def _emit_until(self, head: int) -> None:
        """A line for each run state change from :attr:`position` to ``head`` (and any
        committed past it): only those rows are read, through the kind index, not every row
        of every run (on PostgreSQL each row read is decoded by the client)."""
        if self.position >= head:
            return
        last = head
        for stored in self.journal.events_of_kinds(RUN_STATE_KINDS, self.position):
            state = STATUS_OF_KIND[stored.kind]
            self.emit(self._line(stored.kind, state, stored.decode(), stored.recorded_at_ms))
            last = max(last, stored.position)
        self.position = last

    @staticmethod
    def _line(kind: str, state: str, event: Any, at_ms: int) -> dict[str, Any]:
        line: dict[str, Any] = {
            "ts": timestamp(at_ms / 1000),
            "msg": "run state",
            "run_id": event.run_id,
            "state": state,
        }
        if kind == ACCEPTED:
            line["session_id"] = event.session_id
        reason = getattr(event, "reason", None)
        if is_terminal(kind) and reason:
            line["reason"] = reason
        return line
