"""A tail (actors/tail.py) folds the records of its kinds from the last position it folded:
on demand (what a command calls once its own append returned) and on its own thread as the
journal commits, whoever appends, until the journal closes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from actors.approvals.always_grants import GRANTS_STREAM, KINDS
from actors.stream import Recorded
from actors.tail import Tail
from events import Journal
from events.catalog import GrantRevoked, RunOutput

ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
REVOKED = GrantRevoked(principal="user:ann", tool="shell.run")


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``check`` until true (a wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def test_sync_loads_then_folds_what_was_committed_since_and_nothing_twice(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.db")
    try:
        journal.append(GRANTS_STREAM, [REVOKED], expected_seq=0)
        folded: list[Recorded] = []
        tail = Tail(journal, KINDS, folded.append, "grants")
        assert tail.sync() == 1 and tail.sync() == 0
        journal.append("run/x", [RunOutput(run_id=ID, turn=0, text="hi")], expected_seq=0)
        second = journal.append(GRANTS_STREAM, [REVOKED], expected_seq=1, principal="node:b")
        assert tail.sync() == 1
        assert [(r.stream, r.principal) for r in folded] == [
            (GRANTS_STREAM, "system"),
            (GRANTS_STREAM, "node:b"),
        ]
        assert tail.position == second.last_position
    finally:
        journal.close()


def test_a_follower_folds_another_writers_records_and_ends_with_the_journal(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path / "journal.db")
    folded: list[Recorded] = []
    tail = Tail(journal, KINDS, folded.append, "grants")
    before = set(threading.enumerate())
    try:
        tail.follow(journal)
        tail.follow(journal)  # idempotent: one thread
        (thread,) = set(threading.enumerate()) - before
        assert thread.daemon and thread.name == "tail-grants"
        for seq in range(3):  # another writer: nothing here calls sync
            journal.append(GRANTS_STREAM, [REVOKED], expected_seq=seq, principal="node:b")

            def caught_up(wanted: int = seq + 1) -> bool:
                return len(folded) == wanted

            assert eventually(caught_up)
        assert [r.event for r in folded] == [REVOKED] * 3
    finally:
        journal.close()
    thread.join(timeout=10)
    assert not thread.is_alive()
