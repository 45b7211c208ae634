"""The workload on reel, driven by :class:`bench.runs.Driver` (ends learnt by subscription).

Run by :mod:`bench.peers` in reel's venv (``python -m bench.peers.reel_peer CASE``). ``node``
cases compose the node as ``bench/runs.py`` does (journal, actors, Cedar, the builtin tools);
``full-single`` composes it as ``reel node`` does (:func:`transports.runtime.open_runtime`:
views and their projector, memory, learning, the watchdog, tokens), without the HTTP and gRPC
servers. Both journals are ``synchronous=FULL`` in WAL mode: an fsync per commit.
"""

from __future__ import annotations

import argparse
import gc
import threading
import time
from pathlib import Path
from typing import Any

from actors import ActorsConfig, Node
from bench.peers.workload import (
    IDLE_BATCH,
    TEXT,
    child_main,
    cpu_s,
    idle_result,
    open_fds,
    rss_mib,
    runs_result,
)
from bench.runs import TEXT as RUNS_TEXT
from bench.runs import Driver, open_node, settle_sessions, settle_threads, warm_up
from events import Journal
from transports.models import DeterministicProvider
from transports.runtime import open_runtime

assert TEXT == RUNS_TEXT  # one workload: bench/runs.py's message is the peers'


def drive(
    journal: Journal, node: Node, sessions: int, runs_each: int, synchronous: str
) -> dict[str, Any]:
    """Warm up, then ``sessions`` x ``runs_each`` runs in a closed loop. ``synchronous``: the
    journal's, as it was opened."""
    warm_up(journal, node)
    driver = Driver(journal, node, sessions, runs_each, None)
    cpu = cpu_s()
    elapsed = driver.run()
    cpu = cpu_s() - cpu
    ends = {kind for kind, _, _ in driver.ended.values()}
    if ends != {"run.completed"}:
        raise RuntimeError(f"runs ended {sorted(ends)}, not all completed")
    return runs_result(driver.latencies(), elapsed, cpu, synchronous=synchronous)


def node_case(args: argparse.Namespace, sessions: int, runs_each: int) -> dict[str, Any]:
    journal, node = open_node(args.dir, ActorsConfig())
    try:
        return drive(journal, node, sessions, runs_each, "FULL")  # Journal's default
    finally:
        node.stop()
        journal.close()


def full_single(args: argparse.Namespace) -> dict[str, Any]:
    runtime = open_runtime(Path(args.dir), provider=DeterministicProvider())
    try:
        synchronous = runtime.config.journal.synchronous
        journal = runtime.journal
        assert isinstance(journal, Journal), "the full composition is measured on SQLite"
        return drive(journal, runtime.node, 1, args.runs, synchronous)
    finally:
        runtime.close(0)


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """``args.idle`` sessions with one run each, then left alone under the shipped settings
    (they passivate: their state leaves memory, their thread ends)."""
    config = ActorsConfig()
    journal, node = open_node(args.dir, config)
    try:
        warm_up(journal, node)
        settle_sessions(config)
        settle_threads()
        gc.collect()
        before = threading.active_count(), rss_mib(), open_fds()
        started = time.perf_counter()
        for _ in range(args.idle // IDLE_BATCH):
            Driver(journal, node, IDLE_BATCH, 1, None).run()
        created_s = time.perf_counter() - started
        left = settle_sessions(config)
        settle_threads()
        gc.collect()
        return idle_result(args.idle, *before, created_s=created_s, sessions_live=left)
    finally:
        node.stop()
        journal.close()


if __name__ == "__main__":
    child_main(
        {
            "single": lambda a: node_case(a, 1, a.runs),
            "full-single": full_single,
            "loop": lambda a: node_case(a, a.sessions, a.runs_each),
            "idle": idle,
        }
    )
