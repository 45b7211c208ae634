"""Appends from many threads: dense streams and positions, optimistic concurrency, idempotency,
and group commits in which one bad request fails alone."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from events import (
    AppendRejected,
    AppendResult,
    ConcurrencyConflict,
    Journal,
    JournalClosed,
    JournalReader,
    NodeKey,
    verify,
)
from events.catalog import RunOutput
from tests.events.journal_testkit import assert_dense


@pytest.fixture
def journal(data_dir: Path) -> Iterator[Journal]:
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(data_dir / "journal.db", node_key=key, checkpoint_every_events=100) as j:
        yield j


def out(text: str = "x", run_id: str = "r") -> RunOutput:
    return RunOutput(run_id=run_id, turn=0, text=text)


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` on ``count`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)

    def start(i: int) -> None:
        barrier.wait()
        target(i)

    with ThreadPoolExecutor(count) as pool:
        for future in [pool.submit(start, i) for i in range(count)]:
            future.result()


def test_many_threads_keep_streams_and_positions_dense(journal: Journal) -> None:
    per_thread = 25
    conflicts = []

    def worker(t: int) -> None:
        own = 0
        for i in range(per_thread):
            result = journal.append(f"own/{t}", [out(f"{t}.{i}")], expected_seq=own)
            own = result.next_seq
            journal.append("shared", [out(f"{t}.{i}"), out(f"{t}.{i}b")], expected_seq=None)
            while True:  # the optimistic path: read the next seq, retry on conflict
                try:
                    journal.append(
                        "contended",
                        [out(f"{t}.{i}")],
                        expected_seq=journal.stream_next_seq("contended"),
                    )
                    break
                except ConcurrencyConflict as exc:
                    conflicts.append(exc)

    threads = 12
    run_threads(threads, worker)
    assert journal.head().position == threads * per_thread * 4
    events = assert_dense(journal)
    assert len(journal.read_stream("contended")) == threads * per_thread
    assert len(journal.read_stream("shared")) == threads * per_thread * 2
    for t in range(threads):
        texts = [e.decode().text for e in journal.read_stream(f"own/{t}")]  # type: ignore[attr-defined]
        assert texts == [f"{t}.{i}" for i in range(per_thread)]
    # Each "shared" append is contiguous even though twelve threads raced for the stream.
    shared = [e for e in events if e.stream == "shared"]
    for first, second in zip(shared[::2], shared[1::2], strict=True):
        assert second.position == first.position + 1
        assert second.decode().text == first.decode().text + "b"  # type: ignore[attr-defined]
    assert all(c.stream == "contended" and c.actual_seq > c.expected_seq for c in conflicts)
    report = verify(journal, trusted_public_key=journal.node_key.public_key)  # type: ignore[union-attr]
    assert report.ok, report.fault


def test_conflicting_expected_seq_writes_nothing(journal: Journal) -> None:
    journal.append("run/1", [out("a"), out("b")], expected_seq=0)
    head = journal.head()
    for expected in (0, 1, 3, 100):
        with pytest.raises(ConcurrencyConflict) as info:
            journal.append("run/1", [out("c"), out("d")], expected_seq=expected)
        assert (info.value.stream, info.value.expected_seq, info.value.actual_seq) == (
            "run/1",
            expected,
            2,
        )
        assert "run/1" in str(info.value)
    assert journal.head() == head
    assert journal.count() == 2
    assert journal.append("run/1", [out("c")], expected_seq=2).first_seq == 2


def test_new_stream_expects_zero(journal: Journal) -> None:
    with pytest.raises(ConcurrencyConflict):
        journal.append("run/new", [out()], expected_seq=1)
    assert journal.count() == 0
    result = journal.append("run/new", [out()], expected_seq=0)
    assert (result.first_position, result.first_seq, result.next_seq) == (1, 0, 1)


def test_one_bad_request_in_a_group_commit_fails_alone(journal: Journal) -> None:
    futures = []
    for i in range(40):
        expected = 999 if i % 7 == 3 else None  # every seventh conflicts
        futures.append(journal.submit(f"run/{i % 3}", [out(str(i))], expected_seq=expected))
    ok, conflicted = 0, 0
    for future in futures:
        try:
            future.result()
            ok += 1
        except ConcurrencyConflict:
            conflicted += 1
    assert (ok, conflicted) == (34, 6)
    assert_dense(journal)
    assert journal.count() == 34


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"stream": ""}, "stream"),
        ({"events": []}, "at least one event"),
        ({"expected_seq": -1}, "expected_seq"),
        ({"events": ["not an event"]}, "not an event"),
        ({"events": [RunOutput(run_id="r", turn=0, text="x" * 2_000_000)]}, "limit"),
        ({"stream": "run/\ud800"}, "stream"),
        ({"principal": "user:\udcff"}, "principal"),
        ({"correlation_id": 7}, "correlation_id"),
        ({"events": [RunOutput(run_id="\ud800", turn=0, text="x")]}, "cannot be encoded"),
    ],
)
def test_bad_appends_are_rejected_and_do_not_poison_others(
    journal: Journal, kwargs: dict[str, object], words: str
) -> None:
    innocent = [journal.submit("run/ok", [out(str(i))], expected_seq=None) for i in range(5)]
    args: dict[str, object] = {"stream": "run/bad", "events": [out()], "expected_seq": None}
    args.update(kwargs)
    with pytest.raises(AppendRejected, match=words):
        journal.append(args.pop("stream"), args.pop("events"), **args)  # type: ignore[arg-type]
    innocent += [journal.submit("run/ok", [out(str(i))], expected_seq=None) for i in range(5)]
    assert [f.result().first_seq for f in innocent] == list(range(10))
    assert journal.read_stream("run/bad") == []


def test_idempotent_retry_returns_the_original(journal: Journal) -> None:
    first = journal.append("run/1", [out("a"), out("b")], expected_seq=0, idempotency_key="k1")
    assert not first.duplicate
    again = journal.append("run/1", [out("a"), out("b")], expected_seq=0, idempotency_key="k1")
    assert again.duplicate
    assert (again.first_position, again.last_position, again.event_ids) == (
        first.first_position,
        first.last_position,
        first.event_ids,
    )
    assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq)
    assert journal.count() == 2


def test_idempotent_retry_survives_reopening(data_dir: Path) -> None:
    path = data_dir / "journal.db"
    with Journal(path) as journal:
        first = journal.append("run/1", [out()], expected_seq=0, idempotency_key="k")
    with Journal(path) as journal:
        again = journal.append("run/1", [out()], expected_seq=0, idempotency_key="k")
        assert journal.count() == 1
    assert again.duplicate
    assert again.event_ids == first.event_ids


def test_same_idempotency_key_from_two_threads_at_once(journal: Journal) -> None:
    for round_ in range(20):
        stream, key = f"run/{round_}", f"key-{round_}"
        results: dict[int, AppendResult] = {}

        def attempt(i: int, stream: str = stream, key: str = key, into: dict = results) -> None:
            into[i] = journal.append(
                stream, [out(str(i)), out(str(i))], expected_seq=None, idempotency_key=key
            )

        run_threads(2, attempt)
        a, b = results[0], results[1]
        assert (a.first_position, a.last_position, a.event_ids) == (
            b.first_position,
            b.last_position,
            b.event_ids,
        )
        assert sorted([a.duplicate, b.duplicate]) == [False, True]
        assert len(journal.read_stream(stream)) == 2
    assert_dense(journal)


def test_closed_journal_refuses_appends(data_dir: Path) -> None:
    journal = Journal(data_dir / "journal.db")
    journal.append("run/1", [out()], expected_seq=0)
    journal.close()
    journal.close()  # idempotent
    with pytest.raises(JournalClosed):
        journal.append("run/1", [out()], expected_seq=1)
    with pytest.raises(JournalClosed):
        journal.head()
    reader = JournalReader.open(data_dir / "journal.db")
    assert reader.count() == 1
    reader.close()
