"""Bad appends are rejected without poisoning the group commit, and a closed journal refuses
work. Density, optimistic concurrency, idempotency and appends from many threads are part of the
journal port's contract: see tests/events/journal_conformance.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

import events.sqlite.journal
from events import (
    AppendRejected,
    ConcurrencyConflict,
    Journal,
    JournalClosed,
    JournalReader,
    NodeKey,
)
from events.catalog import RunOutput


@pytest.fixture
def journal(data_dir: Path) -> Iterator[Journal]:
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(data_dir / "journal.db", node_key=key, checkpoint_every_events=100) as j:
        yield j


def out(text: str = "x", run_id: str = "r") -> RunOutput:
    return RunOutput(run_id=run_id, turn=0, text=text)


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
        ({"causation_id": "c\ud800"}, "causation_id"),
        ({"idempotency_key": "k\udfff"}, "idempotency_key"),
        ({"correlation_id": "é\ud800"}, "correlation_id"),
        ({"stream": b"run/bad"}, "stream"),
        ({"causation_id": b"c"}, "causation_id"),
        ({"events": [RunOutput(run_id="r", turn=0, text="\ud800")]}, "cannot be encoded"),
        ({"events": [RunOutput(run_id="\ud800", turn=0, text="x")]}, "field 'run_id'"),
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


def test_envelope_text_beyond_ascii_is_stored_as_given(journal: Journal) -> None:
    """The envelope's fields are told valid by one test when all are ASCII; any other text is
    checked field by field, and valid UTF-8 text is stored as it was given."""
    fields = {
        "principal": "user:ü",
        "correlation_id": "日本",
        "causation_id": "ß",
        "idempotency_key": "ключ",
    }
    result = journal.append("run/é", [out()], expected_seq=0, **fields)
    (stored,) = journal.read_stream("run/é")
    assert stored.position == result.first_position
    assert {name: getattr(stored, name) for name in fields if name != "idempotency_key"} == {
        name: value for name, value in fields.items() if name != "idempotency_key"
    }
    again = journal.append("run/é", [out()], expected_seq=0, **fields)
    assert again.duplicate and again.first_position == result.first_position


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


def test_a_lone_writer_never_wakes_the_writer_thread(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One writer's appends commit in its own thread without waking the writer thread or
    making a future (a wake per append was a thread switch on the durable append's path, a
    future a lock and a condition); what is only submitted still wakes it, and commits; a
    refused append still raises."""
    wakes: list[str] = []
    notify = journal._wake.notify

    def counted(n: int = 1) -> None:
        wakes.append(threading.current_thread().name)
        notify(n)

    futures: list[object] = []

    class CountedFuture(Future[object]):
        def __init__(self) -> None:
            super().__init__()
            futures.append(self)

    monkeypatch.setattr(journal._wake, "notify", counted)
    monkeypatch.setattr(events.sqlite.journal, "Future", CountedFuture)
    for seq in range(20):
        assert journal.append("run/solo", [out(str(seq))], expected_seq=seq).first_seq == seq
    with pytest.raises(ConcurrencyConflict):
        journal.append("run/solo", [out()], expected_seq=3)
    assert wakes == []
    assert futures == []
    assert journal.submit("run/solo", [out()], expected_seq=20).result().first_seq == 20
    assert wakes == [threading.current_thread().name]
    assert len(futures) == 1
    assert [r.stream_seq for r in journal.read_stream("run/solo")] == list(range(21))


def test_a_lone_append_commits_in_its_own_thread_and_many_still_commit_in_order(
    journal: Journal,
) -> None:
    """With no commit under way an append commits itself (no hand-off to the writer thread
    and back: what one writer's durable append costs); appends from many threads at once still
    commit every event once, each stream dense, in the order each thread appended them."""
    committed_in: list[str] = []
    unsubscribe = journal.listen(lambda _head: committed_in.append(threading.current_thread().name))
    journal.append("run/solo", [out()], expected_seq=0)
    assert committed_in == [threading.current_thread().name]
    unsubscribe()

    def write(lane: int) -> None:
        for seq in range(25):
            journal.append(f"run/{lane}", [out(str(seq))], expected_seq=seq)

    threads = [threading.Thread(target=write, args=(lane,)) for lane in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for lane in range(8):
        rows = journal.read_stream(f"run/{lane}")
        assert [r.stream_seq for r in rows] == list(range(25))
        assert [r.decode().text for r in rows] == [str(s) for s in range(25)]  # type: ignore[attr-defined]
    positions = [r.position for r in journal.read(0, limit=10_000)]
    assert positions == list(range(1, len(positions) + 1))


def test_the_writer_remembers_a_bounded_number_of_streams_and_reads_a_forgotten_one_again(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session and run has a stream of its own, so the writer's memory of each stream's
    next seq is bounded (an idle session must not cost the writer anything); a stream it forgot
    is read again from the file: its next seq is still the right one, and a stale
    ``expected_seq`` is still refused, also in a batch that forgets it."""
    monkeypatch.setattr(events.sqlite.journal, "STREAM_SEQS", 4)
    for i in range(3):
        journal.append("run/first", [out(str(i))], expected_seq=i)
    for n in range(20):
        journal.append(f"run/other-{n}", [out()], expected_seq=0)
        assert len(journal._stream_next) <= 4
    with pytest.raises(ConcurrencyConflict):
        journal.append("run/first", [out("stale")], expected_seq=2)
    assert journal.append("run/first", [out("next")], expected_seq=3).first_seq == 3
    batch = [
        journal.submit(stream, [out()], expected_seq=seq)
        for stream, seq in [(f"run/new-{n}", 0) for n in range(6)] + [("run/first", 4)]
    ]
    stale = journal.submit("run/first", [out()], expected_seq=4)
    assert [f.result().first_seq for f in batch] == [0] * 6 + [4]
    with pytest.raises(ConcurrencyConflict):
        stale.result()
    assert [e.stream_seq for e in journal.read_stream("run/first")] == [0, 1, 2, 3, 4]


def test_a_stream_taken_for_new_that_exists_is_refused_alone(journal: Journal) -> None:
    """An append expecting 0 to a stream the writer does not remember is written without
    reading the stream (a new run's, a new call's), the unique index checking it: when the
    stream existed after all, the transaction is made over with every stream read, so that
    request alone is refused, the rest of its batch commits, and no position is lost."""
    journal.append("run/old", [out("a")], expected_seq=0)
    journal._stream_next.clear()  # as after a restart, or once it was forgotten
    with journal._commit_lock:  # hold the writer off: the requests below form one batch
        batch = [
            journal.submit(stream, [out(stream)], expected_seq=seq)
            for stream, seq in [("run/new-1", 0), ("run/old", 0), ("run/new-2", 0)]
        ]
    with pytest.raises(ConcurrencyConflict) as caught:
        batch[1].result(timeout=10)
    assert (caught.value.expected_seq, caught.value.actual_seq) == (0, 1)
    assert [f.result(timeout=10).first_position for f in (batch[0], batch[2])] == [2, 3]
    assert journal.append("run/old", [out("b")], expected_seq=1).first_position == 4
    assert [r.position for r in journal.read(0)] == [1, 2, 3, 4]


def test_a_submit_its_writer_committed_before_it_returned_still_resolves(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer thread may commit a submitted append before ``submit`` returns its future:
    that future must still be the one resolved (it once was made after the commit, and a caller
    waiting on it hung for ever). Forced here by queueing, then waiting for the commit."""
    queue = journal._enqueue

    def queue_and_wait_for_the_commit(request: Any) -> None:
        queue(request)
        deadline = time.monotonic() + 10
        while getattr(request, "outcome", None) is None and time.monotonic() < deadline:
            time.sleep(0.001)

    monkeypatch.setattr(journal, "_enqueue", queue_and_wait_for_the_commit)
    future = journal.submit("run/1", [out()], expected_seq=0)
    assert future.result(timeout=5).first_seq == 0
