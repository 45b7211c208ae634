"""The following projector lets a burst of commits gather before it reads them (LINGER_S),
and a reader waiting for a position, or a stream following the views, never waits for that:
projections/projector.py, the HTTP reads' read-your-writes (transports/http/freshness.py) and
the followers' signal (projections/follow.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import Journal
from events.catalog import RunAccepted
from projections import Projector
from projections import projector as projector_module
from projections.follow import Signal
from projections.runs import RunsProjection
from transports.http.freshness import views_reach


def accept(journal: Journal, n: int, first: int = 0) -> int:
    """``n`` runs accepted on one session, one commit each, its ``first`` run's seq first;
    the last position."""
    position = 0
    for i in range(first, first + n):
        event = RunAccepted(run_id=f"r{i}", session_id="s1", text="hi")
        result = journal.append("session/s1", [event], expected_seq=i, principal="user:a")
        position = result.last_position
    return position


@pytest.fixture
def following(journal: Journal, views: Path) -> Iterator[Projector]:
    projector = Projector(journal, views, [RunsProjection()])
    projector.follow(journal)
    projector.wait_caught_up()
    yield projector
    projector.close()


def test_commits_made_while_the_projector_lingers_are_folded_in_one_batch(
    journal: Journal, following: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(projector_module, "LINGER_S", 1.0)
    batches: list[int] = []
    following.listen(batches.append)
    last = accept(journal, 5)
    deadline = time.monotonic() + 10
    while following.position < last:
        assert time.monotonic() < deadline, "the views never caught up"
        time.sleep(0.01)
    assert batches == [last]


def test_a_reader_waiting_for_a_position_does_not_wait_for_the_linger(
    journal: Journal, following: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(projector_module, "LINGER_S", 60.0)
    accept(journal, 1)  # the projector now lingers for a minute
    time.sleep(0.05)
    last = accept(journal, 2, first=1)
    started = time.monotonic()
    assert following.wait_for(last, 10) >= last
    assert time.monotonic() - started < 5


def test_an_http_read_waiting_for_its_write_does_not_wait_for_the_linger(
    journal: Journal, following: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(projector_module, "LINGER_S", 60.0)
    accept(journal, 1)
    time.sleep(0.05)
    last = accept(journal, 2, first=1)
    started = time.monotonic()
    assert asyncio.run(views_reach(following, last, 10))
    assert time.monotonic() - started < 5


def test_a_stream_following_the_views_does_not_wait_for_the_linger(
    journal: Journal, following: Projector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SSE, RunStream and a channel's replies wait on a :class:`Signal` of the projector's
    batches: while one waits, each commit is read as it lands."""
    monkeypatch.setattr(projector_module, "LINGER_S", 60.0)

    async def follow() -> float:
        signal = Signal(asyncio.get_running_loop(), following.hurry)
        unsubscribe = following.listen(signal.notify)
        try:
            changed = signal.changed()  # a follower about to wait
            accept(journal, 1)
            started = time.monotonic()
            await asyncio.wait_for(changed, 10)
            return time.monotonic() - started
        finally:
            unsubscribe()

    assert asyncio.run(follow()) < 5


def test_closing_does_not_wait_for_the_linger(
    journal: Journal, views: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(projector_module, "LINGER_S", 60.0)
    projector = Projector(journal, views, [RunsProjection()])
    projector.follow(journal)
    accept(journal, 1)
    time.sleep(0.05)
    started = time.monotonic()
    projector.close()
    assert time.monotonic() - started < 5
