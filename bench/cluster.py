"""Several nodes, one PostgreSQL (issue 24's benchmark): one phase per question, each a function
registered in :data:`PHASES`, all on a throwaway PostgreSQL 15 started here the way the tests
start one (tests/postgres_server.py: ``initdb --no-sync``, ``fsync=on``, as ``postgres``
through ``runuser`` when run as root), one journal schema per case.

- ``shards``: for S = 16, 64 and 256 (``--shard-counts``), the same steady load on one node
  holding every shard: a :class:`LeaseKeeper` (the default TTL) ticked by hand every ``--tick``
  seconds (each tick timed: renew, read the leases, place; the ticks that acquired and verified
  the empty shards at the start are timed apart, ``acquire s``) and a :class:`PostgresJournal`
  over it, ``--threads`` threads each appending one-event ``run.output`` rows round-robin to
  ``--streams`` streams of its own until ``--events`` rows are in; a thread follows
  :meth:`PostgresReader.horizon`, and each row's horizon lag is the time from its append's
  acknowledgement to the follower reading it (0 when it read it first). Then
  :func:`verify_database` over the journal, timed. Each figure is printed with its ratio to
  S = 16's in the same run (the ceiling: what S adds should be nothing), so a figure that
  grows with S shows as a ratio above 1.
- ``verify``: :func:`verify_database` over ``--rows`` rows in ``--verify-shards`` shards
  (appended in batches by a lone journal), with 1, 2 and 4 walking connections
  (``--workers``), alternated over ``--rounds`` rounds: wall seconds, this process's CPU
  seconds (decoding and hashing the rows in Python) and the server's (its processes' in
  ``/proc``), the two figures a loaded machine moves least. ``PSYCOPG_IMPL=python`` measures
  psycopg's pure-Python row loading, ``PSYCOPG_IMPL=binary`` its C one (``psycopg-binary``).

``nodes`` and ``takeover`` (real ``reel node`` processes) are in bench/cluster_nodes.py.

A case that does not finish within ``--timeout`` seconds ends the run with exit 1 and a line
saying what it waited for: never a partial table. Nothing is asserted; targets are the lead's.

Run: ``.venv/bin/python bench/cluster.py --phase shards`` (about two minutes on 2 cores) and
``.venv/bin/python bench/cluster.py --phase verify``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from bench.runs import percentile
from events.catalog import RunOutput
from events.postgres.database import initialise
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseKeeper, LeaseSettings
from events.postgres.reader import LogKey, PostgresReader
from events.postgres.verify import verify_database
from tests import postgres_server
from tests.postgres_server import PostgresServer

TEXT = " ".join(["word"] * 16)


class Timeout(Exception):
    """A case outlived ``--timeout``: the run ends without a table."""


@contextmanager
def server() -> Iterator[PostgresServer]:
    if not postgres_server.available():
        raise SystemExit(
            f"PostgreSQL 15 is not installed ({postgres_server.BIN}): make installs it"
        )
    pg = PostgresServer()
    try:
        yield pg
    finally:
        pg.stop()


def server_cpu(pg: PostgresServer) -> float:
    """CPU seconds the server's processes have used so far: the postmaster's own and its
    reaped children's, and each live child's (a backend, a checkpointer...)."""
    tick = os.sysconf("SC_CLK_TCK")
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile: its time is in the postmaster's reaped children's
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / tick


def journal_of(pg: PostgresServer, shards: int) -> str:
    """A DSN of a new journal schema with ``shards`` shards."""
    dsn = pg.database()
    initialise(dsn, shards)
    return dsn


# --- shards ---------------------------------------------------------------------------------


class Ticker(threading.Thread):
    """Ticks ``keeper`` every ``every`` seconds, as its own thread would, timing each tick."""

    def __init__(self, keeper: LeaseKeeper, every: float) -> None:
        super().__init__(name="bench-ticker", daemon=True)
        self.keeper, self.every = keeper, every
        self.ticks: list[float] = []
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(self.every):
                started = time.perf_counter()
                self.keeper.tick()
                self.ticks.append(time.perf_counter() - started)
        except BaseException as exc:
            self.error = exc


class Follower(threading.Thread):
    """Reads the horizon from the start, noting when it read each position."""

    def __init__(self, dsn: str) -> None:
        super().__init__(name="bench-follower", daemon=True)
        self.reader = PostgresReader(dsn)
        self.seen: dict[int, float] = {}
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        after: LogKey | None = None
        try:
            while not self.stop.is_set():
                rows = self.reader.horizon(after, limit=1000)
                now = time.perf_counter()
                for key, event in rows:
                    self.seen[event.position] = now
                    after = key
                if not rows:
                    time.sleep(0.001)
        except BaseException as exc:
            self.error = exc
        finally:
            self.reader.close()


def _load(journal: PostgresJournal, threads: int, streams: int, events: int) -> dict[int, float]:
    """``events`` one-event appends from ``threads`` threads, each round-robin over ``streams``
    streams of its own: each position's acknowledgement time."""
    acked: dict[int, float] = {}
    left = [events]
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        names = [f"run/{n}.{i}" for i in range(streams)]
        seqs = dict.fromkeys(names, 0)
        try:
            while True:
                for i, name in enumerate(names):
                    with lock:
                        if left[0] <= 0:
                            return
                        left[0] -= 1
                    event = RunOutput(run_id=f"r{n}-{i}", turn=0, text=TEXT)
                    result = journal.append(name, [event], expected_seq=seqs[name])
                    acked[result.first_position] = time.perf_counter()
                    seqs[name] += 1
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(n,), daemon=True) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]
    return acked


def _until(condition: Callable[[], bool], limit: float, what: str) -> None:
    while not condition():
        if time.monotonic() > limit:
            raise Timeout(what)
        time.sleep(0.01)


def shard_case(pg: PostgresServer, shards: int, args: argparse.Namespace) -> dict[str, float]:
    limit = time.monotonic() + args.timeout
    dsn = journal_of(pg, shards)
    keeper = LeaseKeeper(dsn, "bench", settings=LeaseSettings(ready_ticks=0))
    keeper.register()
    started = time.perf_counter()
    while len(keeper.owned()) < shards:  # takes (and verifies) every shard: not counted
        if time.monotonic() > limit:
            raise Timeout(f"S={shards}: the keeper took {len(keeper.owned())} shards")
        keeper.tick()  # each tick stops acquiring when it comes near the keeper's deadline
    acquire_s = time.perf_counter() - started
    ticker = Ticker(keeper, args.tick)
    follower = Follower(dsn)
    journal = PostgresJournal(dsn, node="bench", leases=keeper)
    ticker.start()
    follower.start()
    try:
        acked: dict[int, float] = {}
        failed: list[BaseException] = []

        def load() -> None:
            try:
                acked.update(_load(journal, args.threads, args.streams, args.events))
            except BaseException as exc:
                failed.append(exc)

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        _until(lambda: not loader.is_alive(), limit, f"S={shards}: {args.events} appends")
        if failed:
            raise failed[0]
        if len(acked) != args.events:
            raise Timeout(f"S={shards}: {len(acked)} of {args.events} appends acknowledged")
        _until(
            lambda: len(follower.seen) >= args.events or follower.error is not None,
            limit,
            f"S={shards}: the horizon follower reading every row",
        )
        for thread in (ticker, follower):
            if thread.error is not None:
                raise thread.error
    finally:
        ticker.stop.set()
        follower.stop.set()
        ticker.join()
        follower.join()
        journal.close()
        keeper.stop()
    lags = [max(0.0, follower.seen[p] - t) for p, t in acked.items()]
    started = time.perf_counter()
    report = verify_database(dsn)
    verify_s = time.perf_counter() - started
    if not report.ok:
        raise Timeout(f"S={shards}: verify failed: {report.fault}")
    if len(ticker.ticks) < 2:
        raise Timeout(f"S={shards}: {len(ticker.ticks)} ticks during the load: raise --events")
    return {
        "rows": float(report.events),
        "ticks": float(len(ticker.ticks)),
        "tick_p50": percentile(ticker.ticks, 50) * 1000,
        "tick_p99": percentile(ticker.ticks, 99) * 1000,
        "lag_p50": percentile(lags, 50) * 1000,
        "lag_p99": percentile(lags, 99) * 1000,
        "verify_s": verify_s,
        "acquire_s": acquire_s,
    }


def phase_shards(args: argparse.Namespace) -> int:
    counts = [int(s) for s in args.shard_counts.split(",")]
    with server() as pg:
        results = {s: shard_case(pg, s, args) for s in counts}
    base = results[counts[0]]
    print(
        f"{args.events} one-event appends, {args.threads} threads x {args.streams} streams, "
        f"one node holding every shard, tick every {args.tick} s; ratios to S={counts[0]}"
    )
    print(
        f"{'S':>4} {'rows':>7} {'ticks':>5} {'tick p50 ms':>15} {'tick p99 ms':>15} "
        f"{'lag p50 ms':>15} {'lag p99 ms':>15} {'verify s':>14} {'acquire s':>14}"
    )
    for s, r in results.items():

        def cell(name: str, digits: int = 2, r: dict[str, float] = r) -> str:
            ratio = r[name] / base[name] if base[name] else float("nan")
            return f"{r[name]:.{digits}f} ({ratio:.2f})"

        print(
            f"{s:>4} {r['rows']:>7.0f} {r['ticks']:>5.0f} {cell('tick_p50'):>15} "
            f"{cell('tick_p99'):>15} {cell('lag_p50'):>15} {cell('lag_p99'):>15} "
            f"{cell('verify_s', 3):>14} {cell('acquire_s', 3):>14}"
        )
    return 0


# --- verify ---------------------------------------------------------------------------------


def fill(dsn: str, rows: int, streams: int = 64, batch: int = 200) -> None:
    """``rows`` rows in batches of ``batch`` events over ``streams`` streams (every shard)."""
    journal = PostgresJournal(dsn, node="bench")
    try:
        seqs = [0] * streams
        done = 0
        while done < rows:
            n = (done // batch) % streams
            size = min(batch, rows - done)
            events = [RunOutput(run_id=f"r{n}", turn=i, text=TEXT) for i in range(size)]
            journal.append(f"run/{n}", events, expected_seq=seqs[n])
            seqs[n] += size
            done += size
    finally:
        journal.close()


def phase_verify(args: argparse.Namespace) -> int:
    workers = [int(w) for w in args.workers.split(",")]
    with server() as pg:
        dsn = journal_of(pg, args.verify_shards)
        started = time.perf_counter()
        fill(dsn, args.rows)
        print(
            f"filled {args.rows} rows in {args.verify_shards} shards in "
            f"{time.perf_counter() - started:.1f} s"
        )
        walls: dict[int, list[float]] = {w: [] for w in workers}
        cpus: dict[int, list[float]] = {w: [] for w in workers}
        servers: dict[int, list[float]] = {w: [] for w in workers}
        verify_database(dsn, workers=1)  # warm the server's cache
        for _ in range(args.rounds):
            for w in workers:
                cpu, wall, server_s = time.process_time(), time.perf_counter(), server_cpu(pg)
                report = verify_database(dsn, workers=w)
                walls[w].append(time.perf_counter() - wall)
                cpus[w].append(time.process_time() - cpu)
                servers[w].append(server_cpu(pg) - server_s)
                if not report.ok or report.events != args.rows:
                    raise Timeout(f"verify with {w} workers: {report.fault}, {report.events} rows")
    base = statistics.median(walls[workers[0]])
    print(f"psycopg's {psycopg.pq.__impl__} implementation; medians of {args.rounds} rounds")
    print(
        f"{'workers':>7} {'wall s':>8} {'rounds':>24} {'client CPU s':>12} "
        f"{'server CPU s':>12} {'speed-up':>8}"
    )
    for w in workers:
        wall = statistics.median(walls[w])
        rounds = " / ".join(f"{x:.2f}" for x in walls[w])
        print(
            f"{w:>7} {wall:>8.3f} {rounds:>24} {statistics.median(cpus[w]):>12.2f} "
            f"{statistics.median(servers[w]):>12.2f} {base / wall:>8.2f}"
        )
    return 0


def phase_nodes(args: argparse.Namespace) -> int:
    from bench import cluster_nodes

    cluster_nodes.phase_nodes(args)
    return 0


def phase_takeover(args: argparse.Namespace) -> int:
    from bench import cluster_nodes

    cluster_nodes.phase_takeover(args)
    return 0


PHASES: dict[str, Callable[[argparse.Namespace], int]] = {
    "nodes": phase_nodes,
    "takeover": phase_takeover,
    "shards": phase_shards,
    "verify": phase_verify,
}
"""Each phase by name: one function of the parsed arguments, returning the exit status."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phase", choices=sorted(PHASES), required=True)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    shards = parser.add_argument_group("shards")
    shards.add_argument("--shard-counts", default="16,64,256")
    shards.add_argument("--events", type=int, default=20_000)
    shards.add_argument("--threads", type=int, default=8)
    shards.add_argument("--streams", type=int, default=32, help="streams per thread")
    shards.add_argument("--tick", type=float, default=0.1, help="seconds between timed ticks")
    nodes = parser.add_argument_group("nodes and takeover (bench/cluster_nodes.py)")
    nodes.add_argument("--dir", default=None, help="work dir (default: a new temp dir)")
    nodes.add_argument("--clients", type=int, default=8)
    nodes.add_argument("--runs", type=int, default=200)
    nodes.add_argument("--ttl", type=float, nargs="+", default=[2.0, 5.0])
    nodes.add_argument("--kills", type=int, default=20)
    nodes.add_argument(
        "--node-counts", default="1,2,3", help="nodes: PostgreSQL setups, after one on SQLite"
    )
    nodes.add_argument(
        "--node-rounds", type=int, default=1, help="nodes: every setup this many times, alternated"
    )
    nodes.add_argument(
        "--log-statements", action="store_true", help="nodes: count PostgreSQL's statements"
    )
    nodes.add_argument("--skip-sqlite", action="store_true", help="nodes: PostgreSQL only")
    nodes.add_argument("--py-spy", default=None, help="nodes: py-spy binary; profiles each node")
    verify = parser.add_argument_group("verify")
    verify.add_argument("--rows", type=int, default=200_000)
    verify.add_argument("--verify-shards", type=int, default=16)
    verify.add_argument("--workers", default="1,2,4")
    verify.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    args.dir = args.dir or tempfile.mkdtemp(prefix="reel-cluster-bench-")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the server stopped on the way out
    try:
        return PHASES[args.phase](args)
    except Timeout as exc:
        print(f"cluster bench: not finished: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
