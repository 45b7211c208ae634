"""Journal throughput: reel's durable appends and verify against raw APSW, in the same run.

Every figure is measured next to its ceiling, on the same disk, with the same row sizes:

- ``ceiling``: raw APSW, the journal's own DDL, WAL + ``synchronous=FULL``, one transaction of
  ``executemany`` inserts; the loop builds each row as reel does (ULID, identity bytes, SHA-256
  chain hash, payload digest) from pre-encoded payload bytes;
- ``bare``: a raw connection to a journal file (the real schema and indexes, WAL,
  ``synchronous=FULL``) doing one single-row INSERT per ``BEGIN IMMEDIATE``/``COMMIT``, as the
  writer commits, of rows built before the clock starts: one fsync per event and nothing else,
  the floor a durable one-event append can reach;
- ``append``: :meth:`events.Journal.append` of one ``RunOutput`` (~16 words) per call, from
  1, 8 and 64 threads, each on its own stream with ``expected_seq`` (group commit does the rest);
- ``verify``: :func:`events.sqlite.verify` over a journal of ``--verify-events`` rows, written
directly
  with the real chain functions, with a signed ``journal.checkpoint`` row (a link of the chain)
  every 10,000 rows and 10,000 unsigned rows after the last one (as many as a node leaves
  before its next checkpoint), against the pinned key and a witness holding every checkpoint;
- ``start``: what a node checks before it serves that journal (:func:`events.verify_recent`
  through opening :class:`events.Journal` with its key and witness: dense positions, every
  checkpoint, the rows after the last one), against the full verify in the same run;
- ``floor``: 64 threads doing nothing but the journal's hand-off (queue a Future, one thread
  resolves the drained batch): what one-thread-per-writer can reach under the GIL at all.

Each case runs ``--rounds`` times on a fresh file; the best round is reported (the ceiling too,
which only makes the ratios stricter), with the least process CPU per event of its timed loop
(every thread's: the writer thread's too), the figure a loaded machine does not move much.
Targets are printed as PASS/MISS, never asserted.

Run: ``.venv/bin/python bench/journal.py`` (about one minute on 2 cores). With ``--synchronous
OFF`` the bare and append cases run without fsync (not durable): what is left of each commit is
CPU, and the append's CPU beyond the bare commit's is reel's own work, a figure the disk's
fsync latency on a shared machine does not swing. ``PYTHONPATH=CHECKOUT`` runs this script on
another checkout's ``events`` (before and after, alternated).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import queue
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

import apsw

from events import Journal, JournalReader, NodeKey, Witness, encode, verify
from events.catalog import JournalCheckpoint, RunOutput
from events.chain import GENESIS, identity_bytes, payload_digest, row_hash
from events.checkpoint import CHECKPOINT_KIND, CHECKPOINT_STREAM, Checkpoint
from events.ids import UlidGenerator
from events.sqlite.schema import DDL, connect
from events.witness import read_notes

REPO = Path(__file__).resolve().parent.parent
TEXT = (
    "The journal stores each coalesced chunk of model output as one event, "
    "so replays match exactly."
)
"""16 words (~95 characters): one ``RunOutput`` chunk as the run coalesces them."""
KIND = "run.output"
VERSION = RunOutput.version
PRINCIPAL = "system"
CHECKPOINT_EVERY = 10_000
INSERT = (
    "INSERT INTO events(position, event_id, stream, stream_seq, kind, version, recorded_at_ms,"
    " principal, correlation_id, causation_id, payload, payload_sha256, prev_hash, hash)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
TARGET_WRITERS_RATIO = 0.50
TARGET_VERIFY_S_PER_MILLION = 10.0
TARGET_START_S = 1.0
"""The node's check before it serves, at any size (measured at ``--verify-events``)."""
TARGET_SINGLE_VS_BARE = 0.80  # reel's rate at least 0.8 of the bare rate (issue 23)

Measured = tuple[float, float]
"""A case's events (or round trips) per second, and process CPU seconds per event, of its timed
loop."""

Row = tuple[
    int, str, str, int, str, int, int, str, str | None, str | None, bytes, bytes, bytes, bytes
]


Entry = tuple[str, int, str, int, bytes, str, str | None]
"""One row to chain: stream, stream_seq, kind, version, payload, principal, correlation_id."""


class RunStream:
    """One run's stream: its name, run id and the payload reel would store for it."""

    def __init__(self, ids: UlidGenerator) -> None:
        self.run_id = ids.new()
        self.name = f"run/{self.run_id}"
        self.event = RunOutput(run_id=self.run_id, turn=0, text=TEXT)
        self.payload = encode(self.event)


class Chain:
    """Builds journal rows the way the writer thread does: dense positions, linked hashes."""

    def __init__(self) -> None:
        self.ids = UlidGenerator()
        self.position = 0
        self.prev = GENESIS

    def row(self, stream: RunStream, seq: int, now_ms: int) -> Row:
        return self.entry_row((stream.name, seq, KIND, VERSION, stream.payload, PRINCIPAL,
                               stream.run_id), now_ms)  # fmt: skip

    def entry_row(self, entry: Entry, now_ms: int) -> Row:
        """The next row of the chain for ``entry`` (any kind, any stream)."""
        name, seq, kind, version, payload, principal, correlation_id = entry
        self.position += 1
        event_id = self.ids.new(now_ms)
        identity = identity_bytes(
            self.position,
            event_id,
            name,
            seq,
            kind,
            version,
            now_ms,
            principal,
            correlation_id,
            None,
        )
        digest = row_hash(self.prev, identity, payload)
        row: Row = (
            self.position,
            event_id,
            name,
            seq,
            kind,
            version,
            now_ms,
            principal,
            correlation_id,
            None,
            payload,
            payload_digest(payload),
            self.prev,
            digest,
        )
        self.prev = digest
        return row

    def checkpoint_row(
        self, key: NodeKey, seq: int, previous: int, now_ms: int
    ) -> tuple[Row, Checkpoint]:
        """The ``journal.checkpoint`` row the writer appends (the head signed, as a link), and
        the checkpoint it holds."""
        signed: Checkpoint = key.sign(self.position, self.prev, now_ms, previous=previous)
        payload = encode(signed.event())
        self.position += 1
        event_id = self.ids.new(now_ms)
        version = JournalCheckpoint.version
        identity = identity_bytes(
            self.position, event_id, CHECKPOINT_STREAM, seq, CHECKPOINT_KIND, version, now_ms,
            PRINCIPAL, None, None,
        )  # fmt: skip
        digest = row_hash(self.prev, identity, payload)
        row: Row = (
            self.position, event_id, CHECKPOINT_STREAM, seq, CHECKPOINT_KIND, version, now_ms,
            PRINCIPAL, None, None, payload, payload_digest(payload), self.prev, digest,
        )  # fmt: skip
        self.prev = digest
        return row, signed


def raw_connection(path: Path, synchronous: str = "FULL") -> apsw.Connection:
    """A plain APSW connection to a new file with the journal's schema, WAL mode."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    with conn:
        conn.execute(DDL)
    return conn


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ceiling(work: Path, events: int, streams: int, index: int) -> Measured:
    """Events/s of one executemany transaction, chain computed in the loop."""
    path = work / f"ceiling-{index}.db"
    conn = raw_connection(path)
    ids = UlidGenerator()
    lanes = [RunStream(ids) for _ in range(streams)]
    chain = Chain()
    started, cpu = time.perf_counter(), time.process_time()
    at = now_ms()
    rows = [chain.row(lanes[i % streams], i // streams, at) for i in range(events)]
    with conn:
        conn.executemany(INSERT, rows)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return events / elapsed, cpu / events


def bare_commits(work: Path, events: int, index: int, synchronous: str = "FULL") -> Measured:
    """Events/s of one single-row INSERT per transaction on a journal file (its schema and
    indexes, WAL, synchronous=FULL), rows built before the clock starts: a bare commit."""
    path = work / f"bare-{index}.db"
    conn = connect(path, writable=True)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    stream = RunStream(UlidGenerator())
    chain = Chain()
    at = now_ms()
    rows = [chain.row(stream, seq, at) for seq in range(events)]
    started, cpu = time.perf_counter(), time.process_time()
    for row in rows:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, row)
        conn.execute("COMMIT")
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    conn.close()
    return events / elapsed, cpu / events


def appends(
    work: Path,
    key: NodeKey,
    writers: int,
    events: int,
    index: int,
    per_append: int = 1,
    synchronous: str = "FULL",
) -> Measured:
    """Events/s of ``Journal.append`` (``per_append`` events per call) from ``writers``
    threads, each on its own stream."""
    path = work / f"append-{writers}x{per_append}-{index}.db"
    journal = Journal(path, node_key=key, synchronous=synchronous)
    ids = UlidGenerator()
    calls = max(1, events // writers // per_append)
    lanes = [RunStream(ids) for _ in range(writers)]
    start = threading.Barrier(writers + 1)
    errors: list[BaseException] = []

    def write(lane: RunStream) -> None:
        start.wait()
        try:
            batch = [lane.event] * per_append
            for call in range(calls):
                journal.append(
                    lane.name,
                    batch,
                    expected_seq=call * per_append,
                    correlation_id=lane.run_id,
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    start.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    journal.close()
    if errors:
        raise RuntimeError(f"{len(errors)} writer(s) failed; first: {errors[0]!r}")
    total = writers * calls * per_append
    return total / elapsed, cpu / total


def handoff(writers: int, events: int) -> Measured:
    """Round trips/s of the journal's threading pattern with no work in it: ``writers`` threads
    each queue a Future and wait for it; one thread drains the queue and resolves the batch.

    Not reel code: the floor of one-thread-per-writer under CPython's GIL, measured so the
    64-writer ratio can be read against what this design can reach at all on this machine."""
    requests: queue.SimpleQueue[Future[None] | None] = queue.SimpleQueue()

    def drain() -> None:
        while True:
            batch = [requests.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    batch.append(requests.get_nowait())
            for future in batch:
                if future is None:
                    return
                future.set_result(None)

    per_writer = max(1, events // writers)
    start = threading.Barrier(writers + 1)

    def write() -> None:
        start.wait()
        for _ in range(per_writer):
            future: Future[None] = Future()
            requests.put(future)
            future.result()

    server = threading.Thread(target=drain)
    server.start()
    threads = [threading.Thread(target=write) for _ in range(writers)]
    for thread in threads:
        thread.start()
    start.wait()
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    requests.put(None)
    server.join()
    return writers * per_writer / elapsed, cpu / (writers * per_writer)


def output_entries() -> Iterator[Entry]:
    """``run.output`` rows, 1,000 per stream: the default content of a built journal."""
    ids = UlidGenerator()
    while True:
        lane = RunStream(ids)
        for seq in range(1000):
            yield (lane.name, seq, KIND, VERSION, lane.payload, PRINCIPAL, lane.run_id)


def build_verify_journal(
    path: Path, key: NodeKey, events: int, witness: Path, entries: Iterator[Entry] | None = None
) -> float:
    """Write ``events`` chained rows (``entries``, by default :func:`output_entries`) straight
    into a new journal, with a ``journal.checkpoint`` row every CHECKPOINT_EVERY rows
    (checkpoint rows count, as the writer counts them) and about CHECKPOINT_EVERY unsigned rows
    after the last one; every checkpoint's note goes to ``witness``. Returns the seconds taken.

    Legitimate for a verify benchmark: verify reads whatever rows are there, and these are
    built with the real chain and signing functions, exactly as the writer thread builds them."""
    conn = connect(path, writable=True)  # the real schema, application_id and user_version
    conn.execute("PRAGMA synchronous=OFF")  # setup only: nothing here is measured as durable
    source = entries if entries is not None else output_entries()
    chain = Chain()
    at = now_ms()
    checkpoints = 0
    last_row = 0
    signed_up_to = events - (CHECKPOINT_EVERY - 1)
    notes: list[str] = []

    def rows(count: int) -> Iterator[Row]:
        nonlocal checkpoints, last_row
        for _ in range(count):
            if chain.position + 1 - last_row >= CHECKPOINT_EVERY and chain.position < signed_up_to:
                row, signed = chain.checkpoint_row(key, checkpoints, last_row, at)
                last_row = chain.position
                checkpoints += 1
                notes.append(signed.note())
                yield row
                continue
            yield chain.entry_row(next(source), at)

    started = time.perf_counter()
    while chain.position < events:
        with conn:
            conn.executemany(INSERT, rows(min(100_000, events - chain.position)))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    witness.write_text("".join(note + "\n" for note in notes), encoding="utf-8")
    return time.perf_counter() - started


def start_check(path: Path, key: NodeKey, witness: Path) -> float:
    """Seconds to open the journal for writing as ``reel node`` does: the writer lock, the
    start-up check (with the witness) and the writer thread; closed without a checkpoint."""
    started = time.perf_counter()
    journal = Journal(path, node_key=key, witness=Witness.open(witness))
    elapsed = time.perf_counter() - started
    journal.close(checkpoint=False)
    return elapsed


# Append cost with the new redaction against the previous one (target within 1.2x) is measured
# by bench/redact.py, which loads the earlier redaction from git in the same run.


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def show(label: str, what: str, figure: str, rest: str = "") -> None:
    """One aligned result line: ``label  what  figure  rest``."""
    print(f"{label:<8} {what:<44} {figure:>14}   {rest}".rstrip())


def run(work: Path, args: argparse.Namespace) -> None:
    key = NodeKey.load_or_create(work / "node.key")
    rounds: int = args.rounds
    events: int = args.events
    commits: int = args.commit_events
    sync: str = args.synchronous
    payload = RunStream(UlidGenerator()).payload
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine  {os.cpu_count()} cores, load average {load} (1/5/15 min) at start; "
        f"python {platform.python_version()}, sqlite {apsw.sqlite_lib_version()}"
    )
    print(
        f"payload  RunOutput with {len(TEXT.split())} words of text: {len(payload)} bytes of "
        f"msgpack; best of {rounds} interleaved round(s); files in {work}"
    )

    # Rounds are interleaved (every case once per round) so that a burst of disk or CPU
    # contention from elsewhere on the machine hits every case alike.
    cases: dict[str, Callable[[int], Measured]] = {
        "ceiling": lambda r: ceiling(work, events, 64, r),
        "bare": lambda r: bare_commits(work, commits, r, sync),
        "1": lambda r: appends(work, key, 1, commits, r, synchronous=sync),
        "8": lambda r: appends(work, key, 8, events, r, synchronous=sync),
        "64": lambda r: appends(work, key, 64, events, r, synchronous=sync),
        "64x16": lambda r: appends(work, key, 64, events, r, per_append=16, synchronous=sync),
        "handoff": lambda r: handoff(64, events),
    }
    rate = dict.fromkeys(cases, 0.0)
    cpu = dict.fromkeys(cases, float("inf"))
    if sync != "FULL":
        print(f"mode     synchronous={sync}: no fsync (not durable); the targets are for FULL")
    for r in range(rounds):
        for name, case in cases.items():
            speed, cpu_per_event = case(r)
            rate[name] = max(rate[name], speed)
            cpu[name] = min(cpu[name], cpu_per_event)
    top, bare = rate["ceiling"], rate["bare"]

    def us(name: str) -> str:
        return f"cpu {cpu[name] * 1e6:6.1f} us/ev"

    show(
        "ceiling",
        "raw apsw executemany + sha256 chain",
        f"{top:,.0f} ev/s",
        f"{us('ceiling')}   {events:,} ev",
    )
    show(
        "bare",
        f"raw apsw 1-row commit (WAL, {sync})",
        f"{bare:,.0f} ev/s",
        f"{us('bare')}   {commits:,} commits",
    )
    single = rate["1"] / bare
    show(
        "append",
        f"1 writer  (1 event/commit, {sync})",
        f"{rate['1']:,.0f} ev/s",
        f"{us('1')}   ratio {rate['1'] / top:.3f}   vs bare 1-row commit: {single:.2f}x",
    )
    show(
        "append",
        f"8 writers (1 event/append, {sync})",
        f"{rate['8']:,.0f} ev/s",
        f"{us('8')}   ratio {rate['8'] / top:.3f}",
    )
    show(
        "append",
        f"64 writers (1 event/append, {sync})",
        f"{rate['64']:,.0f} ev/s",
        f"{us('64')}   ratio {rate['64'] / top:.3f} (target >= {TARGET_WRITERS_RATIO:.2f})",
    )
    show(
        "append",
        f"64 writers (16 events/append, {sync})",
        f"{rate['64x16']:,.0f} ev/s",
        f"{us('64x16')}   ratio {rate['64x16'] / top:.3f}   (for reference: hand-offs amortized)",
    )
    show(
        "floor",
        "64 threads, Future round trip only (no I/O)",
        f"{rate['handoff']:,.0f} /s",
        f"{us('handoff')}   ratio {rate['handoff'] / top:.3f}   (the GIL cap of thread-per-writer;"
        " not reel code)",
    )

    n: int = args.verify_events
    path = work / "verify.db"
    witness = work / "witness.notes"
    build_s = build_verify_journal(path, key, n, witness)
    show(
        "build",
        f"{n:,} events written directly (setup)",
        f"{build_s:.1f} s",
        f"{n / build_s:,.0f} ev/s",
    )
    notes = read_notes(witness)[0]
    reader = JournalReader.open(path)
    started, cpu_started = time.perf_counter(), time.process_time()
    report = verify(reader, trusted_public_key=key.public_key, witness=notes)
    verify_s = time.perf_counter() - started
    verify_cpu_s = time.process_time() - cpu_started
    reader.close()
    limit = TARGET_VERIFY_S_PER_MILLION * n / 1_000_000
    show(
        "verify",
        f"{n:,} rows, {report.checkpoints} checkpoint links, witness",
        f"{verify_s:.1f} s",
        f"{n / verify_s:,.0f} ev/s   ratio {n / verify_s / top:.2f} (target < {limit:.1f} s)"
        f"   cpu {verify_cpu_s:.1f} s",
    )
    intact = report.ok and report.events == n and report.anchor == "pinned key + witness"
    if not intact:
        print(f"verify   NOT OK ({report.events:,} events, {report.anchor}): {report.fault}")
    start_s = min(start_check(path, key, witness) for _ in range(rounds))
    show(
        "start",
        f"node's check at {n:,} rows ({report.unsigned_rows:,} after the last checkpoint)",
        f"{start_s:.2f} s",
        f"ratio to the full verify {start_s / verify_s:.3f} (target < {TARGET_START_S:.1f} s)",
    )
    print(f"memory   peak RSS {peak_rss_mib():,.0f} MiB")

    print(
        f"{verdict(rate['64'] / top >= TARGET_WRITERS_RATIO)}     64 writers reach >= 50% of "
        f"the ceiling: {rate['64'] / top:.2f}"
    )
    print(
        f"{verdict(verify_s < limit and intact)}     verify of {n:,} events under {limit:.1f} s: "
        f"{verify_s:.1f} s"
    )
    print(
        f"{verdict(start_s < TARGET_START_S)}     the node's start-up check at {n:,} events "
        f"under {TARGET_START_S:.1f} s: {start_s:.2f} s"
    )
    print(
        f"{verdict(single >= TARGET_SINGLE_VS_BARE)}     1 writer's durable append >= "
        f"{TARGET_SINGLE_VS_BARE:.2f} of a bare 1-row commit's rate: {single:.2f} (CPU per "
        f"append beyond the bare commit's: {(cpu['1'] - cpu['bare']) * 1e6:.1f} us)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--events",
        type=int,
        default=40_000,
        help="events for the ceiling and the 8/64-writer cases",
    )
    parser.add_argument(
        "--commit-events",
        type=int,
        default=3_000,
        help="events for the one-commit-per-event cases (bare, 1 writer)",
    )
    parser.add_argument(
        "--synchronous",
        choices=("FULL", "OFF"),
        default="FULL",
        help="the bare and append cases' mode; OFF (no fsync, not durable) leaves only the CPU"
        " of each commit, the part that is reel's own",
    )
    parser.add_argument("--verify-events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / ".cache" / "bench",
        help="temp files go in a new directory under this one (same disk)",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="journal-", dir=args.dir))
    try:
        run(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
