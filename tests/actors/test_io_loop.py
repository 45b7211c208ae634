"""The node's I/O loop's timers (actors/io_loop.py): due in order from any thread, cancelled
without waking the loop, and a heap that does not keep what was cancelled."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.io_loop import COMPACT_AFTER, IoLoop


@pytest.fixture
def io() -> Iterator[IoLoop]:
    loop = IoLoop(name="test-io")
    yield loop
    loop.stop()


def test_timers_set_from_other_threads_fire_on_the_loop_in_deadline_order(io: IoLoop) -> None:
    fired: list[tuple[str, str]] = []
    done = threading.Event()

    def note(name: str) -> None:
        fired.append((name, threading.current_thread().name))
        if len(fired) == 3:
            done.set()

    io.call_later(0.30, lambda: note("third"))
    threading.Thread(target=lambda: io.call_later(0.05, lambda: note("first"))).start()
    io.call_later(0.15, lambda: note("second"))
    assert done.wait(5)
    assert fired == [("first", "test-io"), ("second", "test-io"), ("third", "test-io")]


def test_a_timer_set_before_the_alarm_wakes_the_loop_for_it(io: IoLoop) -> None:
    io.call_later(30, lambda: None)  # the alarm, far away
    time.sleep(0.05)
    fired = threading.Event()
    started = time.monotonic()
    io.call_later(0.05, fired.set)
    assert fired.wait(5)
    assert time.monotonic() - started < 1


def test_a_cancelled_timer_never_fires_and_cancelling_wakes_nothing(
    io: IoLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    fired: list[int] = []
    soon = io.call_later(0.1, lambda: fired.append(0))
    after = threading.Event()
    io.call_later(0.3, after.set)
    time.sleep(0.05)  # the alarm is set for the first
    wakes: list[Any] = []
    real = io.loop.call_soon_threadsafe

    def counted(*args: Any) -> Any:
        wakes.append(args)
        return real(*args)

    monkeypatch.setattr(io.loop, "call_soon_threadsafe", counted)
    soon.cancel()
    soon.cancel()
    far = [io.call_later(60 + i, lambda: fired.append(1)) for i in range(100)]
    for timer in far:
        timer.cancel()
    assert wakes == []  # neither a later timer nor a cancel woke the loop
    assert after.wait(5)
    assert fired == []


def test_cancelled_timers_are_swept_when_they_are_most_of_the_heap(io: IoLoop) -> None:
    kept = io.call_later(3600, lambda: None)
    for _ in range(4 * COMPACT_AFTER):
        io.call_later(3600, lambda: None).cancel()
    io.call_later(3600, lambda: None)
    heap = io._timers._heap  # what the loop holds on to
    assert len(heap) <= COMPACT_AFTER + 3
    assert kept in heap


def test_a_callback_that_raises_does_not_stop_the_next(io: IoLoop) -> None:
    def boom() -> None:
        raise RuntimeError("a timer's callback fails")

    fired = threading.Event()
    io.call_later(0.01, boom)
    io.call_later(0.05, fired.set)
    assert fired.wait(5)
