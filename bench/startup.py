"""Node start-up at journal size: ``reel node`` ready and stopped, next to its floors, in the
same run.

A data dir is built with a journal of ``--events`` rows written straight into the file with the
real chain and signing functions (:func:`bench.journal.build_verify_journal`), a signed
checkpoint every 10,000 rows and every checkpoint in a witness outside the data dir, holding
what a node that has been in use for a while holds: a few tokens, sessions of ten runs each
(accepted, started, context, ~40 output chunks, turn, completed), a reflection task per run
(enqueued, claimed, succeeded), every 25th run a tool call behind an approval (every 4th of
those granted ``always``), a few incidents opened and resolved. Most rows are run output. The
last run is cut off mid-way (a crash): the first start resolves it, like a node after a crash.

Each round, with real ``reel node`` subprocesses on kernel-chosen ports (rounds alternate):

- ``current``: views.db is up to date: seconds from ``Popen`` to the ready line on stdout (and
  the CPU seconds the node had used by then, every thread: the honest figure on a loaded
  machine), then SIGTERM right after it and the seconds until the process exits (the drain
  grace counts only when runs are in flight: none are);
- ``missing``: views.db deleted: seconds to the ready line, and (for scale) until
  ``/healthz`` no longer says ``catching_up`` (the projector folding the whole journal again);
  the node is then stopped, so the next ``current`` round finds current views.

Ceilings measured in the same rounds: ``python -c pass`` (the interpreter alone),
``python -c 'import transports.node.daemon'`` (the node's code loaded, nothing opened) and
:func:`bench.journal.start_check` (opening the journal for writing as the node does: the lock,
the start-up check with key and witness). Medians are printed with PASS/MISS against the
targets of issue 23; nothing is asserted.

Bytecode: before the rounds reel's own modules are compiled to ``__pycache__`` (``compileall``),
as ``pip install`` compiles an installed package's: an environment with
``PYTHONDONTWRITEBYTECODE=1`` (this machine's sessions) never writes it, and every start would
compile some 260 modules from source, a third of a second or more that no installed node pays.
``--source`` measures that case instead: reel's ``__pycache__`` directories are removed first
and nothing is compiled (run it with ``PYTHONDONTWRITEBYTECODE=1``, or the first start writes
them again).

``--profile``: one more ``current`` start under cProfile (stopped right after its ready line),
printing where the time before the ready line went.

Run: ``.venv/bin/python bench/startup.py`` (several minutes at 1M events on 2 cores).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import pstats
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import events
from bench.journal import (
    TEXT,
    Entry,
    build_verify_journal,
    start_check,
)
from events import NodeKey, encode
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    Event,
    IncidentOpened,
    IncidentResolved,
    RunAccepted,
    RunAwaitingApproval,
    RunCompleted,
    RunContextAssembled,
    RunOutput,
    RunResumed,
    RunStarted,
    RunTurnCompleted,
    SessionCreated,
    TaskClaimed,
    TaskEnqueued,
    TaskSucceeded,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
    kind_of,
)
from events.ids import UlidGenerator
from transports.access.tokens import mint

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

REEL = Path(sys.executable).with_name("reel")
TARGET_READY_CURRENT_S = 1.0
TARGET_READY_MISSING_S = 2.0
TARGET_STOP_S = 1.0
"""Plus the drain grace; no run is in flight here, so the grace is never waited."""
RUNS_PER_SESSION = 10
OUTPUTS_PER_RUN = 40
APPROVAL_EVERY = 25
TOKENS = 5
INCIDENTS = 20
PACKAGES = ("actors", "events", "policies", "projections", "proto", "tools", "transports")
"""reel's own top-level packages, whose bytecode the rounds start with (or without)."""


def _entry(
    stream: str, seq: int, event: Event, principal: str = "node", run: str | None = None
) -> Entry:
    return (stream, seq, kind_of(event), type(event).version, encode(event), principal, run)


def mix() -> Iterator[Entry]:
    """The rows of a journal in use (see the module's docstring), without end."""
    ids = UlidGenerator()
    for n in range(TOKENS):
        _token, created = mint(f"user:bench{n}", ["operator"], token_id=ids.new())
        yield _entry(f"token/{created.token_id}", 0, created, "admin")
    for _ in range(INCIDENTS):
        incident, subject = ids.new(), ids.new()
        stream = f"incident/{incident}"
        opened = IncidentOpened(incident_id=incident, domain="run", subject=subject, evidence={})
        yield _entry(stream, 0, opened)
        yield _entry(stream, 1, IncidentResolved(incident_id=incident, how="cleared"))
    runs = 0
    while True:
        session = ids.new()
        session_stream = f"session/{session}"
        yield _entry(session_stream, 0, SessionCreated(session_id=session), "user:bench0")
        for seq in range(1, RUNS_PER_SESSION + 1):
            runs += 1
            run = ids.new()
            accepted = RunAccepted(run_id=run, session_id=session, text="summarise the log")
            yield _entry(session_stream, seq, accepted, "user:bench0", run)
            yield from _run(ids, run, session, approval=runs % APPROVAL_EVERY == 0, runs=runs)


def _run(
    ids: UlidGenerator, run: str, session: str, *, approval: bool, runs: int
) -> Iterator[Entry]:
    stream = f"run/{run}"
    events: list[Event] = [
        RunStarted(run_id=run, max_turns=8, max_tool_calls=16, wall_clock_s=300.0),
        RunContextAssembled(run_id=run),
    ]
    tool: list[Event] = []
    if approval:
        approval_id, invocation = ids.new(), ids.new()
        always = runs % (APPROVAL_EVERY * 4) == 0
        args = {"command": "ls"}
        tool = [
            ToolProposed(invocation_id=invocation, run_id=run, session_id=session,
                         call_id="call_1", tool="shell.run", arguments=args),
            ToolDecided(invocation_id=invocation, run_id=run, tool="shell.run",
                        outcome="approval_required", reason="ask_each_time"),
            ApprovalRequested(approval_id=approval_id, invocation_id=invocation, run_id=run,
                              session_id=session, tool="shell.run", arguments=args,
                              risk="high", reason="ask_each_time"),
            ApprovalResolved(approval_id=approval_id, invocation_id=invocation, run_id=run,
                             decision="allow", scope="always" if always else "once",
                             decided_by="admin", tool="shell.run",
                             grant_principal="user:bench0" if always else ""),
            ToolCompleted(invocation_id=invocation, run_id=run, tool="shell.run", ok=True,
                          output="bench"),
        ]  # fmt: skip
        events += [
            RunAwaitingApproval(run_id=run, approval_id=approval_id),
            RunResumed(run_id=run, approval_id=approval_id),
        ]
    events += [RunOutput(run_id=run, turn=0, text=TEXT)] * OUTPUTS_PER_RUN
    events += [
        RunTurnCompleted(run_id=run, turn=0, prompt_tokens=900, completion_tokens=600,
                         tool_calls=len(tool) and 1, finish_reason="stop"),
        RunCompleted(run_id=run, answer=TEXT, turns=1, prompt_tokens=900, completion_tokens=600),
    ]  # fmt: skip
    output = encode(events[-3])
    for seq, event in enumerate(events):
        if isinstance(event, RunOutput):  # encoded once: most of the journal is these
            yield (stream, seq, "run.output", RunOutput.version, output, "node", run)
        else:
            yield _entry(stream, seq, event, "node", run)
    invocation_stream = f"tool/{tool[0].invocation_id}" if tool else ""  # type: ignore[attr-defined]
    for seq, event in enumerate(tool):
        yield _entry(invocation_stream, seq, event, "node", run)
    task = ids.new()
    task_stream = f"task/{task}"
    yield _entry(task_stream, 0, TaskEnqueued(task_id=task, task_kind="post_run_reflection",
                                              payload={"run_id": run}, dedupe_key=run))  # fmt: skip
    until = time.time_ns() // 1_000_000 + 60_000
    yield _entry(task_stream, 1, TaskClaimed(task_id=task, attempt=1, worker="w1",
                                             lease_until_ms=until))  # fmt: skip
    yield _entry(task_stream, 2, TaskSucceeded(task_id=task, attempt=1))


# --- processes -------------------------------------------------------------------------------


class Started:
    """A ``reel node`` subprocess and when its ready line came."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.began = time.perf_counter()
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.ready = threading.Event()
        self.ready_at = 0.0
        self.ready_cpu = 0.0
        """CPU seconds the node had used (all its threads) when its ready line was read."""
        self.console = ""
        self.stderr: list[str] = []
        threading.Thread(target=self._stdout, daemon=True).start()
        threading.Thread(target=self._stderr, daemon=True).start()

    def _stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("reel node ready") and not self.ready.is_set():
                self.ready_at = time.perf_counter()
                self.ready_cpu = cpu_of(self.process.pid)
                self.console = line.split("console ", 1)[1].split()[0].rstrip("/")
                self.ready.set()

    def _stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = 600.0) -> float:
        if not self.ready.wait(timeout):
            self.process.kill()
            raise RuntimeError(f"no ready line in {timeout:.0f} s: {self.stderr[-5:]}")
        return self.ready_at - self.began

    def stop(self) -> float:
        """SIGTERM now; seconds until the process exited (exit 0 required)."""
        sent = time.perf_counter()
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(600)
        took = time.perf_counter() - sent
        if code != 0:
            raise RuntimeError(f"reel node exited {code}: {self.stderr[-5:]}")
        return took

    def caught_up(self, timeout: float = 600.0) -> float:
        """Seconds from the start until ``/healthz`` no longer says ``catching_up``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(self.console + "/healthz", timeout=30) as reply:
                status = json.loads(reply.read())["status"]
            if status != "catching_up":
                return time.perf_counter() - self.began
            time.sleep(0.05)
        raise RuntimeError("views did not catch up")


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node_env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "REEL_HTTP_PORT": "0",
        "REEL_GRPC_PORT": "0",
        "REEL_JOURNAL_WITNESS": str(work / "witness.notes"),
    }


def seconds_of(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of running ``argv`` to its end."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime


def bytecode(compiled: bool) -> str:
    """Compile reel's modules (the checkout the node imports) into ``__pycache__``, or remove
    every ``__pycache__`` of them (``compiled`` false); says which, for the output."""
    root = Path(events.__file__).resolve().parent.parent
    for package in PACKAGES:
        if compiled:
            compileall.compile_dir(root / package, quiet=1)
        else:
            for cache in (root / package).rglob("__pycache__"):
                shutil.rmtree(cache, ignore_errors=True)
    if compiled:
        return f"reel's modules in {root} compiled to bytecode first, as an install does"
    return f"reel's modules in {root} without bytecode: each start compiles them from source"


def drop_views(data: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (data / f"views.db{suffix}").unlink(missing_ok=True)


def profile_start(data: Path, work: Path, top: int) -> None:
    """One ``current`` start under cProfile, stopped right after the ready line."""
    out, script = work / "start.prof", work / "reel_node.py"
    script.write_text("from transports.cli.main import main\n\nmain()\n")
    argv = [sys.executable, "-m", "cProfile", "-o", str(out), str(script), "node", "--data",
            str(data)]  # fmt: skip
    node = Started(argv, node_env(work))
    ready = node.wait_ready()
    node.stop()
    print(f"profile  one start under cProfile: ready after {ready:.2f} s; reel's top {top}")
    stats = pstats.Stats(str(out))
    # reel's own functions only: imports are the CLI's (issue 23's CLI bullet), not start-up's.
    stats.sort_stats("cumulative").print_stats(r"/(actors|events|projections|transports)/", top)


def run(work: Path, args: argparse.Namespace) -> None:
    data = work / "data"
    data.mkdir(mode=0o700)
    key = NodeKey.load_or_create(data / "node.key")
    witness = work / "witness.notes"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine  {os.cpu_count()} cores, load average {load} (1/5/15 min) at start; "
        f"python {platform.python_version()}; files in {work}"
    )
    build_s = build_verify_journal(data / "journal.db", key, args.events, witness, mix())
    size = (data / "journal.db").stat().st_size / 2**20
    print(
        f"build    {args.events:,} events written directly (setup): {build_s:.1f} s, "
        f"{size:,.0f} MiB"
    )
    print(f"bytecode {bytecode(not args.source)}")
    env = node_env(work)
    argv = [str(REEL), "node", "--data", str(data)]
    # The first start resolves the cut-off run and folds the views: not measured.
    first = Started(argv, env)
    first_ready = first.wait_ready()
    first_views = first.caught_up()
    first.stop()
    print(f"first    ready after {first_ready:.2f} s, views after {first_views:.2f} s (setup)")

    names = ("pass", "import", "check", "current", "stop", "missing", "views")
    figures: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in ("pass", "import", "current", "missing")}
    for _ in range(args.rounds):
        for name, code in (("pass", "pass"), ("import", "import transports.node.daemon")):
            wall, used = seconds_of([sys.executable, "-c", code])
            figures[name].append(wall)
            cpu[name].append(used)
        figures["check"].append(start_check(data / "journal.db", key, witness))
        node = Started(argv, env)
        figures["current"].append(node.wait_ready())
        cpu["current"].append(node.ready_cpu)
        figures["stop"].append(node.stop())
        drop_views(data)
        node = Started(argv, env)
        figures["missing"].append(node.wait_ready())
        cpu["missing"].append(node.ready_cpu)
        figures["views"].append(node.caught_up())
        node.stop()
        if args.verbose:
            print("round    " + "  ".join(f"{k} {v[-1]:.2f}" for k, v in figures.items())
                  + "  cpu " + "  ".join(f"{k} {v[-1]:.2f}" for k, v in cpu.items()))  # fmt: skip
    med = {k: statistics.median(v) for k, v in figures.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu.items()}
    floor = med["import"] + med["check"]
    n = f"{args.events:,}"
    print(f"floor    python -c pass {med['pass']:.2f} s (CPU {cpu_med['pass']:.2f}); import "
          f"transports.node.daemon {med['import']:.2f} s (CPU {cpu_med['import']:.2f}); journal "
          f"start-up check {med['check']:.2f} s")  # fmt: skip
    print(f"ready    views current: {med['current']:.2f} s, CPU {cpu_med['current']:.2f} s   "
          f"({med['current'] / floor:.1f}x import + check = {floor:.2f} s)")  # fmt: skip
    print(f"ready    views missing: {med['missing']:.2f} s, CPU {cpu_med['missing']:.2f} s   "
          f"({med['missing'] / floor:.1f}x import + check); views current {med['views']:.2f} s "
          "after the start")  # fmt: skip
    print(f"stop     SIGTERM right after the ready line: exit after {med['stop']:.2f} s")
    for case, target in (("current", TARGET_READY_CURRENT_S), ("missing", TARGET_READY_MISSING_S)):
        print(f"{verdict(med[case] < target)}     ready at {n} events with views {case} under "
              f"{target:.0f} s: {med[case]:.2f} s")  # fmt: skip
    print(f"{verdict(med['stop'] < TARGET_STOP_S)}     SIGTERM right after start exits within "
          f"{TARGET_STOP_S:.0f} s (+ the drain grace, not waited: no run in flight): "
          f"{med['stop']:.2f} s")  # fmt: skip
    print(f"medians of {args.rounds} alternated round(s); load average now "
          + " / ".join(f"{x:.2f}" for x in os.getloadavg()))  # fmt: skip
    if args.profile:
        profile_start(data, work, args.profile)


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="profile one more start; print the TOP entries")  # fmt: skip
    parser.add_argument("--verbose", action="store_true", help="print every round")
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--source", action="store_true",
                        help="start without reel's bytecode (see the docstring)")  # fmt: skip
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="reel-startup-"))
    try:
        run(work, args)
    finally:
        if args.keep:
            print(f"kept     {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
