"""Runs through the actor system, next to the journal appends they cost, in the same run.

Each phase runs in its own child process (``--phase``), so its thread count and its peak RSS
(``ru_maxrss``) are its own and not what an earlier phase left behind:

- ``single``: one session, ``--runs`` runs one after another; ``concurrent``: ``--sessions``
  sessions at once, each running ``--runs / --sessions`` runs one after another. Every run is
  ``StartRun`` with the deterministic provider and one builtin tool call (``echo``), so it
  takes two turns. A run's latency is from ``node.send(StartRun)`` to the commit of its
  ``run.completed`` (timed by a callback on that append's commit future, in the writer
  thread). The driver is one thread: it learns of ends by that subscription, never by reading
  the journal, and sends each session's next run at once (a closed loop; nothing is queued
  behind a live run); a run that has not ended within two minutes fails the phase. Each
  phase prints its commits a run (the journal's listener, called once per commit): a
  sequential run waits for each of its commits' fsync in turn, a closed loop shares them.
  ``paced``: the same sessions with runs offered at 150 runs/s in total, for latency at the
  target load (a closed loop of 100 sessions has latency = 100 / throughput by Little's law,
  whatever the system does).
- ``ceiling`` (in the same child, after the runs): the events those runs produced, read back
  from the journal and appended again with :meth:`events.Journal.append` to a fresh journal:
  same streams, kinds, payloads and envelopes, one event per append as the actors do, one
  thread per session (a session's runs append one after another, as in the actor system).
  The ratio is runs/s through the actors over the runs/s the bare appends allow.
- ``idle``: for each of ``--idle-sessions`` (default 2,000 and 100,000), that many sessions
  created with ``ResolveSession(create=True)`` (256 outstanding at a time) and left alone
  under the shipped settings; live threads and RSS once they have passivated, against the same
  node before the sessions existed, and the time a woken session takes to answer.

``--repo PATH`` runs every phase against another checkout of reel (``git worktree add``), so
before/after figures come from the same script on the same machine, back to back.

Threads (``threading.active_count``) and current RSS (``VmRSS``) are sampled every 10 ms.
Targets are printed as PASS/MISS, never asserted; the exit status is 0 unless the bench broke.

Run: ``.venv/bin/python bench/runs.py [--runs N] [--dir DIR]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pykka

from actors import ActorsConfig, Node, ToolGate
from actors.messages import (
    GetSessionState,
    ResolveSession,
    RunTicket,
    SessionInfo,
    StartRun,
)
from events import Event, Journal, NodeKey, StoredEvent, kind_of
from policies import PolicyEngine
from tools import ToolsConfig, build_catalog
from transports.models import DeterministicProvider

REPO = Path(__file__).resolve().parent.parent

TEXT = 'benchmark run: say hello back\n/tool echo {"text": "hi"}'
"""Two turns: the first proposes ``echo``, the second answers the text and the tool result."""
TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})
"""By name, not imported: ``--repo`` checkouts older than ``events.lifecycle`` run this too."""
TARGET_RUNS_PER_S = 150.0
TARGET_P99_S = 0.250
CREATE_WINDOW = 256
"""Session creations outstanding at once in the idle phase."""
IDLE_WAIT_S = 120.0
"""The longest the idle phase waits for the live session count to settle. A checkout whose
sessions keep their thread longer than this when idle (``idle_passivate_s``; 300 s before
passivation became the default) is measured right after its last session was created."""
WAKE_SAMPLE = 20
"""Idle sessions, picked at random, that the idle phase wakes one at a time."""
TARGET_IDLE_FLOOR_MIB = 100.0
"""The issue's target for 2,000 idle sessions: under 100 MiB of RSS."""
TARGET_IDLE_KIB_EACH = 10.0
"""Above that floor, 10 KiB of RSS per idle session: 100,000 sessions in 977 MiB, under 1 GiB.
An idle session should cost an entry in the directory's index and, for the most recent ones, a
folded state in its bounded cache: well under 10 KiB. With its thread it cost ~26 KiB of RSS
(2,000 sessions: +51.5 MiB before this change), so the target fails if idle sessions still
cost about a thread's worth of memory, and a node with 100,000 of them fits in 1 GiB."""
RUN_TIMEOUT_S = 120.0
"""A phase that has not seen every run end by then fails (the child exits non-zero)."""


# --- measuring ------------------------------------------------------------------------------


def rss_mib() -> float:
    """Current resident set size of this process (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Sampler:
    """Samples live threads and current RSS every ``interval_s`` on a thread of its own."""

    def __init__(self, interval_s: float = 0.01) -> None:
        self.interval_s = interval_s
        self.peak_threads = threading.active_count()
        self.peak_rss = rss_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_threads = max(self.peak_threads, threading.active_count())
            self.peak_rss = max(self.peak_rss, rss_mib())


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (``q`` in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


# --- the node -------------------------------------------------------------------------------


def open_node(work: Path, config: ActorsConfig) -> tuple[Journal, Node]:
    """A journal and a started node in ``work``, as the daemon composes them."""
    workspace = work / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    journal = Journal(work / "journal.db", node_key=NodeKey.load_or_create(work / "node.key"))
    node = Node(
        journal=journal,
        provider=DeterministicProvider(),
        catalog=build_catalog(ToolsConfig(workspace_dir=str(workspace))),
        gate=ToolGate(PolicyEngine.load(None)),
        workspace=workspace,
        config=config,
    )
    node.start()
    return journal, node


class Driver:
    """Keeps every session busy with one run at a time, from one thread.

    ``node.send`` is non-blocking; the ticket's ``run_id`` arrives on the reply future. The
    driver learns of ends by subscription, never by reading the journal: for the duration of
    :meth:`run` it taps the journal's ``submit`` and ``append``, and when an append's last
    event ends a run it records the run's end and the time once the commit is durable (a
    callback on ``submit``'s future, in the writer thread; on ``append``'s return, in the
    thread that committed it) and wakes the driver, which sends that session's next run. So a
    run's latency is from ``node.send`` to its terminal commit and does not include the
    driver's own reaction time, and the driver costs the node one kind lookup per append.

    With ``rate`` None the loop is closed: a session's next run is sent as soon as the last one
    ended (every session always has a run live: throughput). With ``rate`` runs/s, run ``k``
    of session ``i`` is due at ``k * sessions + i`` / rate seconds after the start, and sent
    then or when the session's previous run ends, whichever is later (latency at that load).
    Every run must end within :data:`RUN_TIMEOUT_S`, or :meth:`run` raises.
    """

    def __init__(
        self, journal: Journal, node: Node, sessions: int, runs_each: int, rate: float | None
    ) -> None:
        self.journal = journal
        self.node = node
        self.sessions = sessions
        self.runs_each = runs_each
        self.rate = rate
        self.lock = threading.Lock()
        self.sent_at: dict[str, float] = {}
        """run_id -> perf_counter at send."""
        self.session_of_run: dict[str, int] = {}
        self.session_ids: dict[int, str] = {}
        self.left = dict.fromkeys(range(sessions), runs_each)
        self.due: list[tuple[float, int]] = []
        """(when, session) heap of the next sends."""
        self.started = 0.0
        self.errors: list[BaseException] = []
        self.signalled = threading.Condition()
        self.commits: list[tuple[str, str, int, float]] = []
        """(run_id, terminal kind, position, perf_counter) per terminal commit, appended by the
        writer thread (under ``signalled``) and taken by the driver."""
        self.ticketed = False
        """A ticket arrived since the driver last woke (under ``signalled``)."""
        self.ended: dict[str, tuple[str, int, float]] = {}
        """run_id -> (terminal kind, position, perf_counter at its commit)."""
        self.unmatched: dict[str, tuple[str, int, float]] = {}
        """Ends seen before their ticket's reply callback ran (the session replies after it
        launched the run, so on a busy machine the reply can come late): matched later."""

    def _tap(self) -> Callable[[], None]:
        """Wrap the journal's ``submit`` and ``append`` (which commits in its caller's thread
        when no commit is under way, without ``submit``) to see each run's terminal append;
        returns the undo."""
        submit, append = self.journal.submit, self.journal.append

        def tapped_submit(stream: str, events: Sequence[Event], **envelope: Any) -> Future[Any]:
            future = submit(stream, events, **envelope)
            run_id = envelope.get("correlation_id")
            kind = kind_of(events[-1])
            if run_id is not None and kind in TERMINAL:
                future.add_done_callback(lambda done: self._on_end(run_id, kind, done))
            return future

        def tapped_append(stream: str, events: Sequence[Event], **envelope: Any) -> Any:
            result = append(stream, events, **envelope)
            run_id = envelope.get("correlation_id")
            kind = kind_of(events[-1])
            if run_id is not None and kind in TERMINAL:
                done: Future[Any] = Future()
                done.set_result(result)
                self._on_end(run_id, kind, done)
            return result

        self.journal.submit = tapped_submit  # type: ignore[method-assign]
        self.journal.append = tapped_append  # type: ignore[method-assign]

        def undo() -> None:
            vars(self.journal).pop("submit", None)
            vars(self.journal).pop("append", None)

        return undo

    def _on_end(self, run_id: str, kind: str, done: Future[Any]) -> None:
        """A terminal append's commit future resolved (in the writer thread, at the commit)."""
        at = time.perf_counter()
        if done.exception() is None:
            with self.signalled:
                self.commits.append((run_id, kind, done.result().last_position, at))
                self.signalled.notify()

    def _schedule(self, lane: int, now: float) -> None:
        if self.left[lane] <= 0:
            return
        index = self.runs_each - self.left[lane]
        when = now
        if self.rate is not None:
            when = max(now, self.started + (index * self.sessions + lane) / self.rate)
        heapq.heappush(self.due, (when, lane))

    def _send(self, lane: int) -> None:
        self.left[lane] -= 1
        session_id = self.session_ids.get(lane)
        command = (
            StartRun(text=TEXT, session_id=session_id)
            if session_id is not None
            else StartRun(text=TEXT, create=True)
        )
        started = time.perf_counter()
        reply = self.node.send(command)

        def accepted(done: Future[Any]) -> None:  # runs in the session actor's thread
            error = done.exception()
            if error is not None:
                self.errors.append(error)
                return
            ticket: RunTicket = done.result()
            with self.lock:
                self.sent_at[ticket.run_id] = started
                self.session_of_run[ticket.run_id] = lane
                self.session_ids[lane] = ticket.session_id
            with self.signalled:  # an end seen before this ticket waits for it
                self.ticketed = True
                self.signalled.notify()

        reply.add_done_callback(accepted)

    def run(self) -> float:
        """Drive every run to its end; returns the seconds from first send to last commit.
        Raises RuntimeError when a StartRun failed or not every run ended within
        :data:`RUN_TIMEOUT_S` (no partial figure)."""
        untap = self._tap()
        total = self.sessions * self.runs_each
        self.started = time.perf_counter()
        deadline = self.started + RUN_TIMEOUT_S
        for lane in range(self.sessions):
            self._schedule(lane, self.started)
        try:
            while len(self.ended) < total and not self.errors:
                now = time.perf_counter()
                if now > deadline:
                    raise RuntimeError(
                        f"timed out after {RUN_TIMEOUT_S:.0f} s: {len(self.ended)} of {total} "
                        "runs ended (no partial figure is printed)"
                    )
                while self.due and self.due[0][0] <= now:
                    self._send(heapq.heappop(self.due)[1])
                wait = min(0.5, self.due[0][0] - now) if self.due else 0.5
                with self.signalled:
                    self.signalled.wait_for(lambda: self.commits or self.ticketed, max(wait, 0))
                    fresh, self.commits, self.ticketed = self.commits, [], False
                now = time.perf_counter()
                for run_id, end in list(self.unmatched.items()):
                    self._ended(run_id, *end, now)
                for run_id, kind, position, at in fresh:
                    self._ended(run_id, kind, position, at, now)
        finally:
            untap()
        if self.errors:
            raise RuntimeError(f"a StartRun failed: {self.errors[0]!r}")
        return max(at for _, _, at in self.ended.values()) - self.started

    @property
    def last_position(self) -> int:
        """The position of the last terminal event seen."""
        return max(position for _, position, _ in self.ended.values())

    def _ended(self, run_id: str, kind: str, position: int, at: float, now: float) -> None:
        """Every end seen while tapped is one of ours (the warm-up run ended before)."""
        with self.lock:
            lane = self.session_of_run.get(run_id)
        if lane is None:
            self.unmatched[run_id] = (kind, position, at)
            return
        self.unmatched.pop(run_id, None)
        if run_id in self.ended:
            return
        self.ended[run_id] = (kind, position, at)
        self._schedule(lane, now)

    def latencies(self) -> list[float]:
        return [at - self.sent_at[run_id] for run_id, (_, _, at) in self.ended.items()]


def warm_up(journal: Journal, node: Node) -> int:
    """One run in a session of its own (imports, first tool call), driven as the measured ones;
    returns a position at or past its last event."""
    driver = Driver(journal, node, 1, 1, None)
    driver.run()
    return max(journal.committed_position, driver.last_position)


# --- the ceiling ----------------------------------------------------------------------------


class RecordedAppend:
    """One recorded append, decoded up front so the replay only does what the actors do."""

    __slots__ = ("causation_id", "correlation_id", "event", "principal", "seq", "stream")

    def __init__(self, stored: StoredEvent) -> None:
        self.stream = stored.stream
        self.seq = stored.stream_seq
        self.event: Event = stored.decode()
        self.principal = stored.principal
        self.correlation_id = stored.correlation_id
        self.causation_id = stored.causation_id


def lanes_of(
    events: list[StoredEvent], session_of_run: dict[str, int]
) -> list[list[RecordedAppend]]:
    """The recorded events split by the session whose thread(s) appended them, in order.

    ``session/<id>`` events belong to their session; run and tool events carry the run id as
    correlation id, which maps to its session."""
    by_session_id: dict[str, int] = {}
    for stored in events:
        if stored.kind == "run.accepted" and stored.correlation_id in session_of_run:
            by_session_id[stored.stream.removeprefix("session/")] = session_of_run[
                stored.correlation_id
            ]
    lanes: dict[int, list[RecordedAppend]] = {}
    for stored in events:
        if stored.stream.startswith("session/"):
            lane = by_session_id[stored.stream.removeprefix("session/")]
        else:
            assert stored.correlation_id is not None
            lane = session_of_run[stored.correlation_id]
        lanes.setdefault(lane, []).append(RecordedAppend(stored))
    return list(lanes.values())


def ceiling(work: Path, lanes: list[list[RecordedAppend]]) -> tuple[float, float, float]:
    """Replay ``lanes`` (one thread each) into a fresh journal; returns (events/s, seconds,
    CPU seconds)."""
    journal = Journal(work / "ceiling.db", node_key=NodeKey.load_or_create(work / "node.key"))
    start = threading.Barrier(len(lanes) + 1)
    errors: list[BaseException] = []

    def replay(lane: list[RecordedAppend]) -> None:
        start.wait()
        try:
            for a in lane:
                journal.append(
                    a.stream,
                    [a.event],
                    expected_seq=a.seq,
                    principal=a.principal,
                    correlation_id=a.correlation_id,
                    causation_id=a.causation_id,
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=replay, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    start.wait()
    started, cpu = time.perf_counter(), cpu_s()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu
    journal.close()
    if errors:
        raise RuntimeError(f"{len(errors)} replay thread(s) failed; first: {errors[0]!r}")
    return sum(len(lane) for lane in lanes) / elapsed, elapsed, cpu


# --- phases (each in a child process) -------------------------------------------------------


def phase_runs(
    work: Path, sessions: int, runs_each: int, rate: float | None = None
) -> dict[str, Any]:
    """Runs through the actor system, then (closed loop only) the ceiling of their appends."""
    baseline_threads = threading.active_count()
    journal, node = open_node(work, ActorsConfig())
    node_threads = threading.active_count()
    warm = warm_up(journal, node)
    driver = Driver(journal, node, sessions, runs_each, rate)
    rss_before = rss_mib()
    # Commits counted by the journal's listener (called once per commit, by whichever thread
    # committed): a sequential run waits for each of its commits' fsync in turn.
    commits = itertools.count()

    def committed_one(_head: int) -> None:
        next(commits)

    unlisten = journal.listen(committed_one)
    cpu_before = cpu_s()
    with Sampler() as sampler:
        elapsed = driver.run()
    cpu = cpu_s() - cpu_before
    unlisten()
    committed = next(commits)
    peak_rss = peak_rss_mib()
    latencies = driver.latencies()
    open_fds = len(os.listdir("/proc/self/fd"))
    node.stop()
    # The journal's own checkpoint rows (one per 10,000 events) are no run's: not replayed.
    events = [e for e in read_all(journal, warm) if e.kind != "journal.checkpoint"]
    journal.close()

    kinds: dict[str, int] = {}
    for stored in events:
        kinds[stored.kind] = kinds.get(stored.kind, 0) + 1
    ends: dict[str, int] = {}
    for kind, _, _ in driver.ended.values():
        ends[kind] = ends.get(kind, 0) + 1
    runs = len(driver.ended)
    lanes = lanes_of(events, driver.session_of_run)
    ceiling_rate, ceiling_s, ceiling_cpu = (
        ceiling(work, lanes) if rate is None else (float("nan"), float("nan"), float("nan"))
    )
    return {
        "reel_from": reel_from(),
        "rate": rate,
        "sessions": sessions,
        "runs": runs,
        "planned": sessions * runs_each,
        "ends": ends,
        "elapsed_s": elapsed,
        "runs_per_s": runs / elapsed,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "max_s": max(latencies, default=float("nan")),
        "events": len(events),
        "commits": committed,
        "kinds": kinds,
        "payload_bytes": sum(len(e.payload) for e in events),
        "ceiling_events_per_s": ceiling_rate,
        "ceiling_s": ceiling_s,
        "ceiling_cpu_s": ceiling_cpu,
        "ceiling_threads": len(lanes),
        "baseline_threads": baseline_threads,
        "node_threads": node_threads,
        "peak_threads": sampler.peak_threads,
        "rss_before_mib": rss_before,
        "peak_rss_sampled_mib": sampler.peak_rss,
        "peak_rss_mib": peak_rss,
        "cpu_s": cpu,
        "open_fds": open_fds,
    }


def read_all(journal: Journal, after: int) -> list[StoredEvent]:
    """Every event past ``after``, in position order."""
    out: list[StoredEvent] = []
    while True:
        batch = journal.read(after, limit=10_000)
        if not batch:
            return out
        out.extend(batch)
        after = batch[-1].position


def reel_from() -> str:
    """The checkout this process imported reel from."""
    import actors

    return str(Path(actors.__file__).resolve().parent.parent)


def thread_room() -> int:
    """How many threads this machine lets the process start: the smallest of ``pid_max``,
    ``threads-max`` and ``RLIMIT_NPROC`` (every thread takes a pid)."""
    limits = [resource.getrlimit(resource.RLIMIT_NPROC)[0]]
    for name in ("pid_max", "threads-max"):
        with contextlib.suppress(OSError, ValueError):
            limits.append(int(Path(f"/proc/sys/kernel/{name}").read_text()))
    return min(limit for limit in limits if limit > 0)


def live_sessions() -> int:
    """Live session actors, found by class name: the class's module moved with the layout
    (``--repo`` may be a checkout from before)."""
    return sum(r.actor_class.__name__ == "SessionActor" for r in pykka.ActorRegistry.get_all())


def settle_sessions(config: ActorsConfig) -> int:
    """Wait until no session actor is live, or the count has not moved for longer than a
    session takes to passivate (``idle_passivate_s`` + two checks + 2 s), or
    :data:`IDLE_WAIT_S`; returns the count left."""
    quiet_s = config.idle_passivate_s + 2 * config.passivate_check_s + 2.0
    start = changed = time.monotonic()
    last = -1
    while True:
        left = live_sessions()
        now = time.monotonic()
        if left != last:
            last, changed = left, now
        if left == 0 or now - changed > quiet_s or now - start > IDLE_WAIT_S:
            return left
        time.sleep(0.1)


def settle_threads(quiet_s: float = 0.5, limit_s: float = 10.0) -> int:
    """Wait until the live thread count has not moved for ``quiet_s`` (stopped actors' threads
    exit a moment after they leave the registry); returns it."""
    start = changed = time.monotonic()
    last = threading.active_count()
    while time.monotonic() - changed < quiet_s and time.monotonic() - start < limit_s:
        time.sleep(0.05)
        now_count = threading.active_count()
        if now_count != last:
            last, changed = now_count, time.monotonic()
    return last


def kept_actor_threads() -> tuple[int, int]:
    """Actor threads waiting for an actor now, and how many the node keeps at most
    (``actors/actor_threads.py``); (0, 0) for a checkout from before it kept any."""
    try:
        from actors.actor_threads import IDLE_KEEP, idle_actor_threads
    except ImportError:
        return 0, 0
    return idle_actor_threads(), IDLE_KEEP


def phase_idle(work: Path, count: int) -> dict[str, Any]:
    """``count`` sessions created (pipelined) and left idle under the checkout's shipped
    settings; threads and RSS before and once the live session count settles, and a few random
    idle sessions woken. A checkout whose sessions keep their thread longer than
    :data:`IDLE_WAIT_S` is measured right after the last reply, without waiting; with more
    sessions than half the threads the machine allows, it is not run at all."""
    config = ActorsConfig()
    holds_threads = config.idle_passivate_s > IDLE_WAIT_S
    result: dict[str, Any] = {
        "sessions": count,
        "reel_from": reel_from(),
        "idle_passivate_s": config.idle_passivate_s,
        "passivate_check_s": config.passivate_check_s,
        "holds_threads": holds_threads,
    }
    room = thread_room()
    if holds_threads and count > room // 2:
        result["skipped"] = (
            f"not run: every session here keeps a thread for {config.idle_passivate_s:g} s, "
            f"and {count:,} threads exceed half of the {room:,} this machine allows"
        )
        return result
    journal, node = open_node(work, config)
    warm_up(journal, node)  # one session, one run: the code paths are loaded before the baseline
    if not holds_threads:
        settle_sessions(config)  # the warm-up session passivates too
    settle_threads()
    rng = random.Random(count)
    sample: list[str] = []
    """A uniform sample of the created sessions (reservoir), for the wake-up check: the bench
    keeps nothing per session, so the RSS delta is the node's own."""
    replies = created = 0

    def take(reply: Future[Any]) -> None:
        nonlocal replies, created
        info: SessionInfo = reply.result(timeout=60)
        replies += 1
        created += info.created
        if len(sample) < WAKE_SAMPLE:
            sample.append(info.session_id)
        elif (slot := rng.randrange(replies)) < WAKE_SAMPLE:
            sample[slot] = info.session_id

    with Sampler() as sampler:
        kept_before, keep = kept_actor_threads()
        # The node's own threads, and as many waiting actor threads as it may keep.
        fixed_threads = threading.active_count() - kept_before + keep
        rss_before = rss_mib()
        started = time.perf_counter()
        window: deque[Future[Any]] = deque()
        for _ in range(count):  # many clients at once, each waiting for its answer
            window.append(node.send(ResolveSession(create=True)))
            if len(window) >= CREATE_WINDOW:
                take(window.popleft())
        while window:
            take(window.popleft())
        created_s = time.perf_counter() - started
        live_threads = threading.active_count()
        live_at_last_reply = live_sessions()
        rss_live = rss_mib()
        if not holds_threads:
            settle_sessions(config)
            settle_threads()
        settled_s = time.perf_counter() - started - created_s
        after_threads = threading.active_count()
        rss_after = rss_mib()
        sessions_left = live_sessions()
        live_runs = node.services.registry.live_run_count()
        wake_ms: list[float] = []
        answered = 0
        for session_id in sample:
            woken = time.perf_counter()
            state = node.ask(GetSessionState(session_id=session_id), timeout=30)
            wake_ms.append((time.perf_counter() - woken) * 1000)
            answered += getattr(state, "session_id", None) == session_id
    node.stop()
    journal.close()
    return {
        **result,
        "created": created,
        "created_s": created_s,
        "settled_s": settled_s,
        "fixed_threads": fixed_threads,
        "live_threads": live_threads,
        "live_at_last_reply": live_at_last_reply,
        "peak_threads": max(sampler.peak_threads, live_threads),
        "after_threads": after_threads,
        "sessions_left": sessions_left,
        "live_runs": live_runs,
        "rss_before_mib": rss_before,
        "rss_live_mib": rss_live,
        "peak_rss_sampled_mib": sampler.peak_rss,
        "rss_after_mib": rss_after,
        "wake_ms": wake_ms,
        "wake_answered": answered,
    }


# --- the report -----------------------------------------------------------------------------


def child(
    phase: str, args: argparse.Namespace, work: Path, idle_sessions: int = 0
) -> dict[str, Any]:
    """Run one phase in a fresh interpreter that imports reel from ``--repo`` (first on
    ``PYTHONPATH``, run from that checkout); its last stdout line is its result as JSON."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        phase,
        "--runs",
        str(args.runs),
        "--sessions",
        str(args.sessions),
        "--idle-sessions",
        str(idle_sessions),
        "--dir",
        str(work / f"{phase}{idle_sessions or ''}"),
    ]
    path = os.pathsep.join(p for p in (str(args.repo), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, cwd=args.repo
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"phase {phase} failed with exit status {done.returncode}")
    if done.stderr.strip():
        sys.stderr.write(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["reel_from"]) != args.repo:
        raise RuntimeError(
            f"phase {phase} imported reel from {result['reel_from']}, not {args.repo}"
        )
    return result


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def show(label: str, what: str, figure: str, rest: str = "") -> None:
    print(f"{label:<9} {what:<40} {figure:>12}   {rest}".rstrip())


def report_runs(name: str, r: dict[str, Any]) -> None:
    """Print one run phase (with its ceiling, when it has one)."""
    per_run = r["events"] / r["runs"]
    ends = ", ".join(f"{n} {k.removeprefix('run.')}" for k, n in sorted(r["ends"].items()))
    what = f"{r['sessions']} session(s) x {r['planned'] // r['sessions']} runs"
    ratio = ""
    if r["rate"] is None:
        ceiling_runs = r["ceiling_events_per_s"] / per_run
        show(
            "ceiling",
            f"{r['events']:,} appends from {r['ceiling_threads']} thread(s)",
            f"{ceiling_runs:,.1f} runs/s",
            f"{r['ceiling_events_per_s']:,.0f} ev/s ({per_run:.2f} events per run)   "
            f"CPU {r['ceiling_cpu_s'] / r['runs'] * 1000:.1f} ms/run",
        )
        ratio = f"ratio {r['runs_per_s'] / ceiling_runs:.2f}   "
    else:
        what += f" at {r['rate']:g} runs/s offered"
    show(
        name,
        what,
        f"{r['runs_per_s']:,.1f} runs/s",
        f"{ratio}p50 {r['p50_s'] * 1000:.1f} ms   p99 {r['p99_s'] * 1000:.1f} ms   "
        f"max {r['max_s'] * 1000:.1f} ms   ({ends}; {r['commits'] / r['runs']:.2f} commits a run)",
    )
    show(
        "",
        "threads: baseline / node started / peak",
        f"{r['baseline_threads']} / {r['node_threads']} / {r['peak_threads']}",
        f"RSS {r['rss_before_mib']:.0f} MiB before, peak {r['peak_rss_sampled_mib']:.0f} "
        f"(ru_maxrss {r['peak_rss_mib']:.0f})   CPU {r['cpu_s'] / r['runs'] * 1000:.1f} ms/run   "
        f"open fds at the end {r['open_fds']}",
    )


def describe(repo: Path) -> str:
    """The checkout's commit, as ``git describe`` names it (``-dirty`` with local changes)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "not a git checkout"


def main_report(args: argparse.Namespace, work: Path) -> None:
    runs_each = max(1, args.runs // args.sessions)
    print(
        f"reel actors from {args.repo} ({describe(args.repo)}): {args.runs} runs per phase, "
        f"each StartRun + 1 echo tool call (2 turns), deterministic provider, journal "
        f"synchronous=FULL; {os.cpu_count()} CPUs; files in {work}"
    )
    single = child("single", args, work)
    many = child("concurrent", args, work)
    paced = child("paced", args, work)
    idles = [child("idle", args, work, int(n)) for n in args.idle_sessions.split(",")]
    report_runs("1 sess", single)
    kinds = ", ".join(f"{k} {n / single['runs']:.2g}" for k, n in sorted(single["kinds"].items()))
    print(f"{'':<9} events per run: {kinds}")
    report_runs(f"{args.sessions} sess", many)
    print(
        f"{'':<9} closed loop, {runs_each} runs per session one after another: every session "
        f"always has a run live, so p50 ~ {args.sessions} / (runs/s) by Little's law"
    )
    report_runs("paced", paced)
    for idle in idles:
        report_idle(idle)

    rate = many["runs_per_s"]
    print(
        f"{verdict(rate >= TARGET_RUNS_PER_S)}      {args.sessions} sessions, closed loop: "
        f">= {TARGET_RUNS_PER_S:g} runs/s: {rate:.1f}"
    )
    print(
        f"{verdict(paced['p99_s'] < TARGET_P99_S)}      {args.sessions} sessions at "
        f"{TARGET_RUNS_PER_S:g} runs/s offered: p99 < {TARGET_P99_S * 1000:.0f} ms: "
        f"{paced['p99_s'] * 1000:.0f} ms (achieved {paced['runs_per_s']:.1f} runs/s)"
    )
    print(
        f"{verdict(many['p99_s'] < TARGET_P99_S)}      {args.sessions} sessions, closed loop: "
        f"p99 < {TARGET_P99_S * 1000:.0f} ms: {many['p99_s'] * 1000:.0f} ms "
        f"(needs >= {args.sessions / TARGET_P99_S:.0f} runs/s by Little's law)"
    )
    for idle in idles:
        name = f"{idle['sessions']:,} idle sessions"
        if "skipped" in idle:
            print(f"SKIP      {name}: {idle['skipped']}")
            continue
        when = "right after creation" if idle["holds_threads"] else "after settling"
        delta = idle["rss_after_mib"] - idle["rss_before_mib"]
        ceiling_mib = idle_rss_ceiling_mib(idle["sessions"])
        print(
            f"{verdict(delta < ceiling_mib)}      {name}, {when}: RSS delta < "
            f"{ceiling_mib:,.0f} MiB: {delta:+.1f} MiB "
            f"({delta / idle['sessions'] * 1000:.2f} MiB per 1,000)"
        )
        allowed = idle["fixed_threads"] + idle["live_runs"]
        print(
            f"{verdict(idle['after_threads'] <= allowed)}      {name}, {when}: live threads <= "
            f"live runs ({idle['live_runs']}) + the node's fixed {idle['fixed_threads']} "
            f"(with the actor threads it keeps waiting), "
            f"whatever the count: {idle['after_threads']:,}"
        )


def idle_rss_ceiling_mib(sessions: int) -> float:
    """The RSS an idle phase may add: :data:`TARGET_IDLE_FLOOR_MIB`, or
    :data:`TARGET_IDLE_KIB_EACH` per session when that is more."""
    return max(TARGET_IDLE_FLOOR_MIB, sessions * TARGET_IDLE_KIB_EACH / 1024)


def report_idle(idle: dict[str, Any]) -> None:
    settings = (
        f"idle_passivate_s {idle['idle_passivate_s']:g}, passivate_check_s "
        f"{idle['passivate_check_s']:g} (the checkout's defaults)"
    )
    if "skipped" in idle:
        show("idle", f"{idle['sessions']:,} sessions", "-", f"{idle['skipped']}; {settings}")
        return
    show(
        "idle",
        f"{idle['sessions']:,} sessions created",
        f"{idle['created_s']:.1f} s",
        f"{idle['sessions'] / idle['created_s']:,.0f} sessions/s ({CREATE_WINDOW} outstanding, "
        f"{idle['created']:,} new); at the last reply {idle['live_at_last_reply']:,} sessions "
        f"live, threads {idle['fixed_threads']} -> {idle['live_threads']:,} (peak "
        f"{idle['peak_threads']:,}), RSS +{idle['rss_live_mib'] - idle['rss_before_mib']:.0f} "
        f"MiB; {settings}",
    )
    if idle["holds_threads"]:
        what = "right after the last reply"
        rest = (
            f"not waited for: sessions here keep their thread {idle['idle_passivate_s']:g} s "
            "when idle; "
        )
    else:
        what = f"settled: {idle['sessions_left']:,} sessions live"
        rest = "after the last reply; "
    delta = idle["rss_after_mib"] - idle["rss_before_mib"]
    show(
        "",
        what,
        f"{idle['settled_s']:.1f} s",
        f"{rest}threads {idle['after_threads']:,}; RSS {idle['rss_before_mib']:.0f} before -> "
        f"{idle['rss_after_mib']:.0f} MiB after = {delta:+.1f} MiB, "
        f"{delta / idle['sessions'] * 1000:.2f} MiB per 1,000 sessions (peak sampled "
        f"{idle['peak_rss_sampled_mib']:.0f})",
    )
    wake = sorted(idle["wake_ms"])
    woken = "live, none to wake" if idle["sessions_left"] else "idle, each woken"
    show(
        "",
        f"wake-up: {len(wake)} random sessions ({woken})",
        f"p50 {percentile(wake, 50):.1f} ms",
        f"max {max(wake, default=float('nan')):.1f} ms; GetSessionState one at a time, "
        f"{idle['wake_answered']} of {len(wake)} answered with their own state",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per run phase")
    parser.add_argument("--sessions", type=int, default=100, help="sessions of the busy phase")
    parser.add_argument(
        "--idle-sessions", default="2000,100000", help="idle phase sizes, comma-separated"
    )
    parser.add_argument(
        "--repo", type=Path, default=REPO, help="the reel checkout the phases import"
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=REPO / ".cache" / "bench",
        help="temp files go in a new directory under this one",
    )
    parser.add_argument(
        "--phase", choices=("single", "concurrent", "paced", "idle"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    args.repo, args.dir = args.repo.resolve(), args.dir.resolve()
    if not (args.repo / "actors" / "__init__.py").is_file():
        parser.error(f"--repo {args.repo}: not a reel checkout (no actors/__init__.py)")
    if args.phase is not None:  # a child: one phase, its result as one JSON line
        args.dir.mkdir(parents=True, exist_ok=True)
        phases: dict[str, Callable[[], dict[str, Any]]] = {
            "single": lambda: phase_runs(args.dir, 1, args.runs),
            "concurrent": lambda: phase_runs(
                args.dir, args.sessions, max(1, args.runs // args.sessions)
            ),
            "paced": lambda: phase_runs(
                args.dir, args.sessions, max(1, args.runs // args.sessions), TARGET_RUNS_PER_S
            ),
            "idle": lambda: phase_idle(args.dir, int(args.idle_sessions)),
        }
        print(json.dumps(phases[args.phase]()))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="runs-", dir=args.dir))
    try:
        main_report(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
