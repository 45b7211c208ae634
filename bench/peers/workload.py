"""The workload every system runs, and what each child process measures and prints.

Imports nothing outside the standard library: the peers' children run it in their own venvs,
where reel is not installed, and reel's child runs it in reel's.

A run is one message, :data:`TEXT`, answered in two model turns: the first proposes one call of
the ``echo`` tool with :data:`ECHO_ARGUMENTS`, the second answers :func:`answer` of the tool's
result. reel's :class:`transports.models.DeterministicProvider` scripts exactly that from the
message's ``/tool`` line; the peers' local models return the same two answers.

Every case prints one JSON line, its result, as the child's last line of output.
"""

from __future__ import annotations

import argparse
import json
import resource
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMPT = "benchmark run: say hello back"
ECHO_TEXT = "hi"
ECHO_ARGUMENTS = json.dumps({"text": ECHO_TEXT})
TEXT = f"{PROMPT}\n/tool echo {ECHO_ARGUMENTS}"
"""The message of every run (reel's deterministic model reads the ``/tool`` line as its script;
the peers' models answer it the same way)."""
IDLE_BATCH = 100
"""The idle case runs its sessions' one run each this many at a time."""

SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
"""SQLite's ``PRAGMA synchronous`` values by name (FULL in WAL mode: an fsync per commit)."""

Case = Callable[[argparse.Namespace], dict[str, Any]]


def answer(tool_result: str) -> str:
    """The second turn's text, as reel's deterministic model writes it."""
    return f"{PROMPT}\necho -> {tool_result}"


# --- measuring ------------------------------------------------------------------------------


def rss_mib() -> float:
    """Current resident set size of this process (``VmRSS``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def open_fds() -> int:
    return len(list(Path("/proc/self/fd").iterdir()))


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (``q`` in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def runs_result(latencies: list[float], elapsed: float, cpu: float, **extra: Any) -> dict[str, Any]:
    """What a runs case reports: throughput, latency percentiles, CPU per run."""
    runs = len(latencies)
    return {
        "runs": runs,
        "elapsed_s": elapsed,
        "runs_per_s": runs / elapsed,
        "p50_s": percentile(latencies, 50),
        "p99_s": percentile(latencies, 99),
        "cpu_ms_per_run": cpu / runs * 1000,
        "threads": threading.active_count(),
        **extra,
    }


def idle_result(
    count: int, threads_before: int, rss_before: float, fds_before: int, **extra: Any
) -> dict[str, Any]:
    """What the idle case reports, against the figures taken before the sessions existed."""
    return {
        "sessions": count,
        "threads_before": threads_before,
        "threads_after": threading.active_count(),
        "rss_before_mib": rss_before,
        "rss_after_mib": rss_mib(),
        "fds_before": fds_before,
        "fds_after": open_fds(),
        **extra,
    }


def child_main(cases: dict[str, Case]) -> None:
    """A child's entry point: run the case named on the command line, print its result."""
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(cases))
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--runs-each", type=int, default=10)
    parser.add_argument("--idle", type=int, default=2000)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    print(json.dumps(cases[args.case](args)), flush=True)
