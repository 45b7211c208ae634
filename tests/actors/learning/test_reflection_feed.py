"""The reflection feed as a node stops: what it cannot enqueue because the journal is closing is
one warning line naming why, never a traceback (a node's log carries none for a routine stop;
the runs are caught up at the next start)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from actors.learning.reflection import ReflectionFeed
from tests.actors.taskkit import TaskKit


def test_a_feed_stopped_after_its_journal_closed_warns_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kit = TaskKit(tmp_path / "n")
    feed = ReflectionFeed.start(kit.journal, kit.queue, kit.node.io)
    try:
        kit.close()  # the journal closes with the feed still following it
        with caplog.at_level(logging.WARNING, logger="reel.learning"):
            feed.stop(block=True, timeout=10)
    finally:
        if feed.is_alive():
            feed.stop()
    (record,) = [r for r in caplog.records if r.name == "reel.learning"]
    assert "could not enqueue a last time" in record.getMessage()
    assert "JournalClosed" in record.getMessage()
    assert record.exc_info is None
