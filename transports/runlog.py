"""One structured log line (JSON) per run state change, read from the journal after each commit."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from events import Journal, JournalClosed
from events.lifecycle import STATUS_OF_KIND, is_terminal


class RunStateLogger:
    """Follows the journal on its own thread and writes a line per run state change."""

    def __init__(self, journal: Journal, write: Callable[[str], None]) -> None:
        self.journal = journal
        self.write = write
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
            while self.position < head:
                batch = self.journal.read(after_position=self.position, limit=1000)
                if not batch:
                    break
                for stored in batch:
                    state = STATUS_OF_KIND.get(stored.kind)
                    if state is not None:
                        self.write(
                            json.dumps(
                                self._line(
                                    stored.kind, state, stored.decode(), stored.recorded_at_ms
                                )
                            )
                        )
                self.position = batch[-1].position

    @staticmethod
    def _line(kind: str, state: str, event: Any, at_ms: int) -> dict[str, Any]:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds"),
            "msg": "run state",
            "run_id": event.run_id,
            "state": state,
        }
        if kind == "run.accepted":
            line["session_id"] = event.session_id
        reason = getattr(event, "reason", None)
        if is_terminal(kind) and reason:
            line["reason"] = reason
        return line
