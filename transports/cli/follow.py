"""Following a run's tape from the journal: the run's events and its tool invocations', in order."""

from __future__ import annotations

from collections.abc import Iterator

from events import Journal, StoredEvent

TERMINAL_KINDS = frozenset({"run.completed", "run.failed", "run.cancelled"})


def follow_run(journal: Journal, run_id: str, after_position: int = 0) -> Iterator[StoredEvent]:
    """Yield the run's events as they are committed, ending after its terminal event."""
    position = after_position
    while True:
        head = journal.committed_position
        for stored in journal.read_correlated(run_id, after_position=position):
            position = stored.position
            yield stored
            if stored.kind in TERMINAL_KINDS:
                return
        journal.wait_for(head, timeout=0.5)
