"""The abstract conformance suite of the journal port (:mod:`events.port`).

Every journal backend must keep the contract the rest of reel relies on: an empty journal's head;
positions dense from 1 in commit order and ``stream_seq`` dense from 0 per stream; the hash chain
exactly as docs/journal-format.md specifies; atomic multi-event appends that return only after
commit; ``expected_seq`` conflicts that write nothing; idempotency keys that return the original
result; every read in journal order with its ``after`` filter; the commit subscription; signed
checkpoints; and appends from many threads that all land. Each backend's test module subclasses
:class:`JournalConformance` once and says how to open it (``make_journal``, ``make_reader``) and
how many shard chains it keeps (``shards``: SQLite 1, the PostgreSQL runs 4): the chain is
checked per shard (chain format v3, docs/journal-format.md), positions globally.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from events import (
    GENESIS,
    MARKER,
    AppendRejected,
    AppendResult,
    ConcurrencyConflict,
    Head,
    JournalPort,
    JournalReadPort,
    StoredEvent,
)
from events.catalog import (
    JournalCheckpoint,
    RunAccepted,
    RunCompleted,
    RunFailed,
    RunOutput,
    SessionCreated,
    TaskEnqueued,
    TaskFailed,
    TaskSucceeded,
    ToolProposed,
)
from events.chain import row_hash, stored_identity
from events.checkpoint import signature_valid
from tests.events.journal_testkit import all_events

WAIT = 30.0  # a generous bound so a broken wake-up fails the test instead of hanging it


def out(text: str = "x", run_id: str = "r") -> RunOutput:
    return RunOutput(run_id=run_id, turn=0, text=text)


def texts(events: list[StoredEvent]) -> list[str]:
    return [e.decode().text for e in events if e.stream != "journal"]  # type: ignore[attr-defined]


def appended(reader: JournalReadPort) -> list[StoredEvent]:
    """Every row but the journal's own checkpoint rows (stream ``journal``)."""
    return [e for e in all_events(reader) if e.stream != "journal"]


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` on ``count`` threads released together; re-raise the first failure."""
    barrier = threading.Barrier(count)

    def start(i: int) -> None:
        barrier.wait()
        target(i)

    with ThreadPoolExecutor(count) as pool:
        for future in [pool.submit(start, i) for i in range(count)]:
            future.result()


def assert_dense_chain(reader: JournalReadPort, shards: int = 1) -> list[StoredEvent]:
    """Positions are 1..head, every stream's seqs are 0..n-1 and all in one shard, every
    shard's ``shard_pos`` is 1..k, and every row links to the row before it in its shard with
    the hash docs/journal-format.md defines (v3); returns the rows."""
    rows = all_events(reader)
    assert [e.position for e in rows] == list(range(1, len(rows) + 1))
    seqs: dict[str, list[int]] = {}
    shard_of: dict[str, int] = {}
    tips: dict[int, tuple[int, bytes]] = {}
    for e in rows:
        seqs.setdefault(e.stream, []).append(e.stream_seq)
        assert shard_of.setdefault(e.stream, e.shard) == e.shard, f"{e.stream} in two shards"
        assert 0 <= e.shard < shards
        pos, prev = tips.get(e.shard, (0, GENESIS))
        assert e.shard_pos == pos + 1, f"shard {e.shard} is not dense at {e.position}"
        assert e.prev_hash == prev, f"position {e.position} does not link to the row before it"
        identity = stored_identity(shards, e)
        assert e.hash == row_hash(prev, identity, e.payload), f"bad hash at {e.position}"
        tips[e.shard] = (e.shard_pos, e.hash)
    for stream, got in seqs.items():
        assert got == list(range(len(got))), f"stream {stream} is not dense: {got}"
    assert reader.head() == (Head(rows[-1].position, rows[-1].hash) if rows else Head(0, GENESIS))
    return rows


class Heard:
    """A listener that records positions; the journal calls it after an append has already
    returned, so tests wait for what they expect to hear."""

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


class JournalConformance(ABC):
    """Subclass once per backend (named ``Test...``) and implement the two factories."""

    shards = 1
    """How many shard chains the backend under test keeps."""
    signs_checkpoints = True
    """Whether ``checkpoint()`` and ``close()`` sign a checkpoint row right after the head it
    covers (the PostgreSQL journal signs super-checkpoints over every shard's head instead:
    tests/events/test_postgres_checkpoints.py)."""

    def dense_chain(self, reader: JournalReadPort) -> list[StoredEvent]:
        """:func:`assert_dense_chain` with this backend's shard count."""
        return assert_dense_chain(reader, self.shards)

    def needs_checkpoints(self) -> None:
        if not self.signs_checkpoints:
            pytest.skip("this backend signs super-checkpoints (test_postgres_checkpoints.py)")

    @abstractmethod
    def make_journal(self, tmp_path: Path) -> JournalPort:
        """Open the journal kept under ``tmp_path`` for writing, creating it when new, with a
        node key (kept there too) that signs checkpoints. Opening it again after ``close``
        gives the same journal."""

    @abstractmethod
    def make_reader(self, tmp_path: Path) -> JournalReadPort:
        """A reader of the journal under ``tmp_path``, as another process would open it."""

    def verify_journal(self, tmp_path: Path, journal: JournalPort) -> None:
        """The backend's own whole-journal verification, if it has one (default: none)."""
        return None

    @pytest.fixture
    def journal(self, tmp_path: Path) -> Iterator[JournalPort]:
        journal = self.make_journal(tmp_path)
        try:
            yield journal
        finally:
            journal.close()

    # --- the port ----------------------------------------------------------------------------

    def test_the_backend_implements_both_ports(self, journal: JournalPort, tmp_path: Path) -> None:
        assert isinstance(journal, JournalPort)
        reader = self.make_reader(tmp_path)
        try:
            assert isinstance(reader, JournalReadPort)
        finally:
            reader.close()

    def test_an_empty_journal(self, journal: JournalPort) -> None:
        assert journal.head() == Head(0, GENESIS)
        assert journal.committed_position == 0
        assert journal.read() == []
        assert journal.read_stream("run/1") == []
        assert journal.read_correlated("r") == []
        assert journal.first_events("run/") == []
        assert journal.events_of_kinds(("run.output",)) == []
        assert journal.stream_next_seq("run/1") == 0
        assert journal.checkpoints() == []
        assert journal.checkpoint() is None  # nothing to sign
        assert journal.wait_for(0, timeout=0.01) == 0

    # --- positions, seqs and the chain -------------------------------------------------------

    def test_positions_are_dense_from_1_and_seqs_dense_from_0_per_stream(
        self, journal: JournalPort
    ) -> None:
        a1 = journal.append("run/a", [out("a0"), out("a1")], expected_seq=0)
        b1 = journal.append("run/b", [out("b0")], expected_seq=0)
        a2 = journal.append("run/a", [out("a2"), out("a3"), out("a4")], expected_seq=2)
        assert (a1.first_position, a1.last_position, a1.first_seq, a1.last_seq) == (1, 2, 0, 1)
        assert (b1.first_position, b1.last_position, b1.first_seq, b1.last_seq) == (3, 3, 0, 0)
        assert (a2.first_position, a2.last_position, a2.first_seq, a2.last_seq) == (4, 6, 2, 4)
        assert (a2.stream, a2.next_seq, a2.duplicate) == ("run/a", 5, False)
        rows = self.dense_chain(journal)
        assert [(e.stream, e.stream_seq) for e in rows] == [
            ("run/a", 0),
            ("run/a", 1),
            ("run/b", 0),
            ("run/a", 2),
            ("run/a", 3),
            ("run/a", 4),
        ]
        assert texts(rows) == ["a0", "a1", "b0", "a2", "a3", "a4"]
        assert journal.stream_next_seq("run/a") == 5
        assert journal.stream_next_seq("run/b") == 1
        assert journal.committed_position == 6

    def test_stored_events_are_what_was_appended_redacted(self, journal: JournalPort) -> None:
        proposed = ToolProposed(
            invocation_id="t1",
            run_id="r1",
            session_id="s1",
            call_id="c1",
            tool="http.fetch",
            arguments={"url": "https://example.test", "api_key": "hunter2-canary"},
        )
        created = SessionCreated(session_id="s1", session_key="main", label="demo")
        result = journal.append(
            "tool/t1",
            [created, proposed],
            expected_seq=0,
            principal="user:alice",
            correlation_id="r1",
            causation_id="call-1",
        )
        rows = journal.read()
        assert [e.event_id for e in rows] == list(result.event_ids)
        assert len(set(result.event_ids)) == 2
        for e in rows:
            assert (e.principal, e.correlation_id, e.causation_id) == ("user:alice", "r1", "call-1")
            assert e.recorded_at_ms == result.recorded_at_ms  # one commit, one clock reading
        assert [e.kind for e in rows] == ["session.created", "tool.proposed"]
        assert rows[0].decode() == created
        stored = rows[1].decode()
        assert isinstance(stored, ToolProposed)
        assert stored.arguments == {"url": "https://example.test", "api_key": MARKER}
        assert all(b"hunter2-canary" not in e.payload for e in rows)
        # The result hands back what was stored, redacted: what a writer folds.
        assert result.events == (created, stored)
        submitted = journal.submit("tool/t1", [proposed], expected_seq=2).result(WAIT)
        assert submitted.events == (stored,)
        defaults = journal.append("run/2", [out()], expected_seq=None)
        (row,) = journal.read(after_position=defaults.first_position - 1)
        assert (row.principal, row.correlation_id, row.causation_id) == ("system", None, None)

    def test_an_append_is_committed_when_it_returns(
        self, journal: JournalPort, tmp_path: Path
    ) -> None:
        reader = self.make_reader(tmp_path)
        try:
            for i in range(5):
                result = journal.append("run/1", [out(str(i)), out(str(i))], expected_seq=2 * i)
                assert journal.committed_position >= result.last_position
                assert reader.head().position == result.last_position  # another reader sees it
                assert reader.read_stream("run/1")[-1].position == result.last_position
        finally:
            reader.close()

    def test_reopening_keeps_head_seqs_and_chain(self, tmp_path: Path) -> None:
        journal = self.make_journal(tmp_path)
        journal.append("run/1", [out("a"), out("b")], expected_seq=0)
        head = journal.head()
        journal.close()  # signs the head: a checkpoint row at 3 covering 1..2
        signed_rows = 1 if self.signs_checkpoints else 0
        journal = self.make_journal(tmp_path)
        try:
            assert journal.head().position == head.position + signed_rows
            assert journal.committed_position == head.position + signed_rows
            if self.signs_checkpoints:
                (signed,) = journal.checkpoints()
                assert (signed.position, signed.hash, signed.row_position) == (2, head.hash, 3)
            else:
                assert journal.head() == head
            assert journal.stream_next_seq("run/1") == 2
            with pytest.raises(ConcurrencyConflict):
                journal.append("run/1", [out("c")], expected_seq=0)
            next_position = 3 + signed_rows
            assert journal.append("run/1", [out("c")], expected_seq=2).first_position == (
                next_position
            )
            assert texts(self.dense_chain(journal)) == ["a", "b", "c"]
        finally:
            journal.close()

    # --- optimistic concurrency and atomicity -------------------------------------------------

    def test_conflicting_expected_seq_writes_nothing(self, journal: JournalPort) -> None:
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
        assert len(all_events(journal)) == 2
        result = journal.append("run/1", [out("c")], expected_seq=2)
        assert (result.first_seq, result.first_position) == (2, 3)  # no position was used up

    def test_new_stream_expects_zero(self, journal: JournalPort) -> None:
        with pytest.raises(ConcurrencyConflict):
            journal.append("run/new", [out()], expected_seq=1)
        assert all_events(journal) == []
        result = journal.append("run/new", [out()], expected_seq=0)
        assert (result.first_position, result.first_seq, result.next_seq) == (1, 0, 1)

    def test_no_expected_seq_skips_the_check(self, journal: JournalPort) -> None:
        journal.append("run/1", [out()], expected_seq=0)
        assert journal.append("run/1", [out()], expected_seq=None).first_seq == 1

    def test_one_bad_request_among_many_fails_alone(self, journal: JournalPort) -> None:
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
        assert len(self.dense_chain(journal)) == 34

    def test_many_threads_keep_streams_and_positions_dense(
        self, journal: JournalPort, tmp_path: Path
    ) -> None:
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
        events = self.dense_chain(journal)
        assert len(journal.read_stream("contended")) == threads * per_thread
        assert len(journal.read_stream("shared")) == threads * per_thread * 2
        for t in range(threads):
            assert texts(journal.read_stream(f"own/{t}")) == [f"{t}.{i}" for i in range(per_thread)]
        # Each "shared" append is contiguous even though twelve threads raced for the stream.
        shared = [e for e in events if e.stream == "shared"]
        for first, second in zip(shared[::2], shared[1::2], strict=True):
            assert second.position == first.position + 1
            assert texts([second]) == [texts([first])[0] + "b"]
        assert all(c.stream == "contended" and c.actual_seq > c.expected_seq for c in conflicts)
        self.verify_journal(tmp_path, journal)

    # --- idempotency --------------------------------------------------------------------------

    def test_idempotent_retry_returns_the_original(self, journal: JournalPort) -> None:
        first = journal.append("run/1", [out("a"), out("b")], expected_seq=0, idempotency_key="k1")
        assert not first.duplicate
        journal.append("run/2", [out("other")], expected_seq=0)
        again = journal.append("run/1", [out("a"), out("b")], expected_seq=0, idempotency_key="k1")
        assert again.duplicate
        assert (again.first_position, again.last_position, again.event_ids) == (
            first.first_position,
            first.last_position,
            first.event_ids,
        )
        assert (again.first_seq, again.last_seq) == (first.first_seq, first.last_seq)
        assert again.recorded_at_ms == first.recorded_at_ms
        assert again.events == first.events == (out("a"), out("b"))
        assert len(all_events(journal)) == 3

    def test_idempotent_retry_survives_reopening(self, tmp_path: Path) -> None:
        journal = self.make_journal(tmp_path)
        try:
            first = journal.append("run/1", [out()], expected_seq=0, idempotency_key="k")
        finally:
            journal.close()
        journal = self.make_journal(tmp_path)
        try:
            again = journal.append("run/1", [out()], expected_seq=0, idempotency_key="k")
            assert len(appended(journal)) == 1
        finally:
            journal.close()
        assert again.duplicate
        assert again.event_ids == first.event_ids

    def test_same_idempotency_key_from_two_threads_at_once(self, journal: JournalPort) -> None:
        for round_ in range(20):
            stream, key = f"run/{round_}", f"key-{round_}"
            results: dict[int, AppendResult] = {}

            def attempt(
                i: int,
                stream: str = stream,
                key: str = key,
                into: dict[int, AppendResult] = results,
            ) -> None:
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
        self.dense_chain(journal)

    # --- reads --------------------------------------------------------------------------------

    def test_read_pages_by_position(self, journal: JournalPort) -> None:
        for i in range(10):
            journal.append(f"run/{i % 3}", [out(str(i))], expected_seq=None)
        assert [e.position for e in journal.read(limit=4)] == [1, 2, 3, 4]
        assert [e.position for e in journal.read(after_position=4, limit=4)] == [5, 6, 7, 8]
        assert [e.position for e in journal.read(after_position=8)] == [9, 10]
        assert journal.read(after_position=10) == []

    def test_read_stream_filters_by_seq_in_seq_order(self, journal: JournalPort) -> None:
        for i in range(6):
            journal.append("run/1", [out(str(i))], expected_seq=i)
            journal.append("run/10", [out("other")], expected_seq=i)  # a prefix is not a match
        assert texts(journal.read_stream("run/1")) == ["0", "1", "2", "3", "4", "5"]
        assert texts(journal.read_stream("run/1", after_seq=3)) == ["4", "5"]
        assert texts(journal.read_stream("run/1", after_seq=1, limit=2)) == ["2", "3"]
        assert journal.read_stream("run/1", after_seq=5) == []
        assert journal.read_stream("run/") == []

    def test_read_correlated_is_a_runs_events_in_journal_order(self, journal: JournalPort) -> None:
        journal.append("session/s", [out("accepted")], expected_seq=0, correlation_id="r1")
        journal.append("run/r2", [out("elsewhere")], expected_seq=0, correlation_id="r2")
        journal.append("run/r1", [out("started")], expected_seq=0, correlation_id="r1")
        journal.append("tool/t1", [out("t0"), out("t1")], expected_seq=0, correlation_id="r1")
        journal.append("run/r1", [out("uncorrelated")], expected_seq=1)
        journal.append("run/r1", [out("done")], expected_seq=2, correlation_id="r1")
        tape = journal.read_correlated("r1")
        assert texts(tape) == ["accepted", "started", "t0", "t1", "done"]
        assert [e.position for e in tape] == [1, 3, 4, 5, 7]
        assert texts(journal.read_correlated("r1", after_position=4)) == ["t1", "done"]
        assert journal.read_correlated("r1", after_position=7) == []
        assert journal.read_correlated("r3") == []

    def test_first_events_of_streams_by_prefix(self, journal: JournalPort) -> None:
        journal.append("session/b", [out("b0"), out("b1")], expected_seq=0)
        journal.append("run/x", [out("x0")], expected_seq=0)
        journal.append("session/a", [out("a0")], expected_seq=0)
        journal.append("sessions/z", [out("z0")], expected_seq=0)
        journal.append("session/b", [out("b2")], expected_seq=2)
        assert texts(journal.first_events("session/")) == ["b0", "a0"]  # position order
        assert texts(journal.first_events("run/")) == ["x0"]
        assert texts(journal.first_events("session")) == ["b0", "a0", "z0"]
        assert journal.first_events("tool/") == []

    def test_events_of_kinds_in_journal_order_after_a_position(self, journal: JournalPort) -> None:
        created = SessionCreated(session_id="s", session_key="k", label=None)
        journal.append("session/s", [created, out("o1")], expected_seq=0)
        journal.append("run/1", [out("o2")], expected_seq=0)
        other = SessionCreated(session_id="t", session_key="l", label=None)
        journal.append("session/t", [other], expected_seq=0)
        found = journal.events_of_kinds(("run.output", "session.created"))
        assert [(e.position, e.kind) for e in found] == [
            (1, "session.created"),
            (2, "run.output"),
            (3, "run.output"),
            (4, "session.created"),
        ]
        assert [e.position for e in journal.events_of_kinds(("run.output",))] == [2, 3]
        assert [e.position for e in journal.events_of_kinds(("session.created",), 1)] == [4]
        assert journal.events_of_kinds(("tool.proposed",)) == []

    def test_open_events_leave_out_what_an_ending_kind_shares_a_key_with(
        self, journal: JournalPort
    ) -> None:
        """Streams (or correlation ids) opened by one kind and not ended by another: an end in
        another stream counts by correlation id, an end of another kind or key does not, and
        an event without the key is never open."""
        for name in ("a", "b", "c"):
            created = SessionCreated(session_id=name, session_key=name, label=None)
            journal.append(f"session/{name}", [created], expected_seq=0, correlation_id=name)
        journal.append("session/none", [SessionCreated(session_id="n")], expected_seq=0)
        journal.append("run/b", [out("end", "b")], expected_seq=0, correlation_id="b")
        journal.append("session/c", [out("end", "c")], expected_seq=1, correlation_id="x")
        by_run = journal.open_events("session.created", ("run.output",), "correlation_id")
        assert [e.correlation_id for e in by_run] == ["a", "c"]
        by_stream = journal.open_events("session.created", ("run.output",), "stream")
        assert [e.stream for e in by_stream] == ["session/a", "session/b", "session/none"]
        assert journal.open_events("session.created", ("tool.proposed",), "stream") == [
            e for e in journal.events_of_kinds(("session.created",))
        ]
        assert journal.open_events("tool.proposed", ("run.output",), "stream") == []

    def test_open_runs_and_tasks_are_those_no_end_shares_a_key_with(
        self, journal: JournalPort
    ) -> None:
        """The kinds start-up asks for (runs accepted and not ended, tasks enqueued and not
        ended; the SQLite journal answers them from a partial index of their own): an end of
        one run or task never closes another, a ``task.failed`` (not an ending kind) leaves its
        task open, and the answer comes in journal order with every column."""
        ended = ("run.cancelled", "run.completed", "run.failed")
        for run in ("r1", "r2", "r3", "r4"):
            accepted = RunAccepted(run_id=run, session_id="s", text="hi")
            journal.append(f"session/{run}", [accepted], expected_seq=0, correlation_id=run)
        journal.append("run/r1", [RunCompleted(run_id="r1", answer="a")], expected_seq=0,
                       correlation_id="r1")  # fmt: skip
        journal.append("run/r3", [RunFailed(run_id="r3", reason="interrupted")], expected_seq=0,
                       correlation_id="r3")  # fmt: skip
        open_runs = journal.open_events("run.accepted", ended, "correlation_id")
        assert [e.correlation_id for e in open_runs] == ["r2", "r4"]
        every = journal.events_of_kinds(("run.accepted",))
        assert open_runs == [e for e in every if e.correlation_id in {"r2", "r4"}]
        for task in ("t1", "t2", "t3"):
            enqueued = TaskEnqueued(task_id=task, task_kind="k", payload={})
            journal.append(f"task/{task}", [enqueued], expected_seq=0)
        journal.append("task/t1", [TaskSucceeded(task_id="t1", attempt=1)], expected_seq=1)
        journal.append("task/t2", [TaskFailed(task_id="t2", attempt=1, error="e")], expected_seq=1)
        ending = ("task.cancelled", "task.expired", "task.succeeded")
        open_tasks = journal.open_events("task.enqueued", ending, "stream")
        assert [e.stream for e in open_tasks] == ["task/t2", "task/t3"]

    # --- subscription -------------------------------------------------------------------------

    def test_wait_for_wakes_after_a_commit_from_another_thread(self, journal: JournalPort) -> None:
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

    def test_wait_for_returns_at_once_when_already_past(self, journal: JournalPort) -> None:
        journal.append("run/1", [out()], expected_seq=0)
        assert journal.wait_for(0, timeout=WAIT) == 1

    def test_wait_for_times_out_with_the_current_head(self, journal: JournalPort) -> None:
        journal.append("run/1", [out()], expected_seq=0)
        assert journal.wait_for(1, timeout=0.01) == 1

    def test_close_wakes_waiters(self, tmp_path: Path) -> None:
        journal = self.make_journal(tmp_path)
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

    def test_listeners_get_the_head_position_after_each_commit(self, journal: JournalPort) -> None:
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

    def test_listeners_see_every_commit_under_concurrency(self, journal: JournalPort) -> None:
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

    # --- checkpoints --------------------------------------------------------------------------

    def test_checkpoint_signs_the_head(self, journal: JournalPort, tmp_path: Path) -> None:
        self.needs_checkpoints()
        key = journal.node_key
        assert key is not None
        journal.append("run/1", [out(), out()], expected_seq=0)
        before = journal.head()
        signed = journal.checkpoint()
        assert signed is not None
        # The checkpoint signs the head and is the next link of the chain itself.
        assert (signed.position, signed.hash, signed.row_position) == (2, before.hash, 3)
        assert signed.previous == 0
        (row,) = journal.read(after_position=2)
        assert (row.stream, row.stream_seq, row.kind) == ("journal", 0, "journal.checkpoint")
        assert row.prev_hash == before.hash and journal.head() == Head(3, row.hash)
        assert signed.public_key == key.public_key
        assert signature_valid(signed, key.public_key)
        assert journal.checkpoint() is None  # the head is already signed
        assert journal.checkpoints() == [signed]
        journal.append("run/1", [out()], expected_seq=2)
        later = journal.checkpoint()
        assert later is not None
        assert (later.position, later.row_position, later.previous) == (4, 5, 3)
        assert journal.checkpoints() == [signed, later]
        self.dense_chain(journal)
        reader = self.make_reader(tmp_path)
        try:
            assert reader.checkpoints() == [signed, later]
        finally:
            reader.close()

    def test_only_the_journal_writes_checkpoints(self, journal: JournalPort) -> None:
        forged = JournalCheckpoint(
            origin="reel.journal/0", size=0, hash=GENESIS, previous=0, public_key=b"", signature=b""
        )
        with pytest.raises(AppendRejected, match="journal"):
            journal.append("journal", [out()], expected_seq=None)
        with pytest.raises(AppendRejected, match=r"journal\.checkpoint"):
            journal.append("run/1", [forged], expected_seq=0)
        assert journal.head() == Head(0, GENESIS)

    def test_close_signs_a_final_checkpoint_unless_told_not_to(self, tmp_path: Path) -> None:
        self.needs_checkpoints()
        journal = self.make_journal(tmp_path)
        journal.append("run/1", [out()], expected_seq=0)
        journal.close(checkpoint=False)
        journal = self.make_journal(tmp_path)
        assert journal.checkpoints() == []
        journal.append("run/1", [out()], expected_seq=1)
        journal.close()
        journal.close()  # idempotent
        self.make_journal(tmp_path).close()  # the head is already signed: nothing to add
        reader = self.make_reader(tmp_path)
        try:
            assert [c.position for c in reader.checkpoints()] == [2]
            (second,) = reader.read(after_position=1, limit=1)
            assert reader.checkpoints()[0].hash == second.hash
            assert reader.head().position == 3  # the checkpoint row
        finally:
            reader.close()
