"""Subscription: readers blocked in ``wait_for`` wake after a commit; listeners get the head."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import Journal
from events.catalog import RunOutput

WAIT = 30.0  # a generous bound so a broken wake-up fails the test instead of hanging it


@pytest.fixture
def journal(data_dir: Path) -> Iterator[Journal]:
    with Journal(data_dir / "journal.db") as j:
        yield j


def out(text: str = "x") -> RunOutput:
    return RunOutput(run_id="r", turn=0, text=text)


def test_wait_for_wakes_after_a_commit_from_another_thread(journal: Journal) -> None:
    woke: list[int] = []
    waiting = threading.Event()

    def waiter() -> None:
        waiting.set()
        woke.append(journal.wait_for(0, timeout=WAIT))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait()
    writer = threading.Thread(
        target=lambda: journal.append("run/1", [out(), out()], expected_seq=0)
    )
    writer.start()
    writer.join()
    thread.join()
    assert woke == [2]
    assert journal.committed_position == 2


def test_wait_for_returns_at_once_when_already_past(journal: Journal) -> None:
    journal.append("run/1", [out()], expected_seq=0)
    assert journal.wait_for(0, timeout=WAIT) == 1


def test_wait_for_times_out_with_the_current_head(journal: Journal) -> None:
    journal.append("run/1", [out()], expected_seq=0)
    assert journal.wait_for(1, timeout=0.01) == 1


def test_close_wakes_waiters(data_dir: Path) -> None:
    journal = Journal(data_dir / "journal.db")
    result: list[int] = []
    waiting = threading.Event()

    def waiter() -> None:
        waiting.set()
        result.append(journal.wait_for(0, timeout=WAIT))

    thread = threading.Thread(target=waiter)
    thread.start()
    waiting.wait()
    journal.close()
    thread.join()
    assert result == [0]


class Heard:
    """A listener that records positions; the writer thread calls it after an append has
    already returned, so tests wait for what they expect to hear."""

    def __init__(self) -> None:
        self.positions: list[int] = []
        self._changed = threading.Condition()

    def __call__(self, position: int) -> None:
        with self._changed:
            self.positions.append(position)
            self._changed.notify_all()

    def until(self, position: int) -> list[int]:
        with self._changed:
            self._changed.wait_for(lambda: position in self.positions, WAIT)
            return list(self.positions)


def test_listeners_get_the_head_position_after_each_commit(journal: Journal) -> None:
    heard = Heard()
    unsubscribe = journal.listen(heard)

    def broken(_: int) -> None:
        raise RuntimeError("a faulty listener must not stop the writer")

    journal.listen(broken)
    journal.append("run/1", [out(), out(), out()], expected_seq=0)
    assert heard.until(3) == [3]
    journal.append("run/2", [out()], expected_seq=0)
    assert heard.until(4) == [3, 4]
    unsubscribe()
    unsubscribe()  # idempotent
    later = Heard()
    journal.listen(later)
    journal.append("run/2", [out()], expected_seq=1)
    assert later.until(5) == [5]
    assert heard.positions == [3, 4]


def test_listeners_see_every_commit_under_concurrency(journal: Journal) -> None:
    listener = Heard()
    journal.listen(listener)
    threads = [
        threading.Thread(
            target=lambda t=t: [
                journal.append(f"run/{t}", [out()], expected_seq=None) for _ in range(20)
            ]
        )
        for t in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    heard = listener.until(120)
    assert heard == sorted(heard)
    assert len(set(heard)) == len(heard)
    assert heard[-1] == journal.head().position == 120
