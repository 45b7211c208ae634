"""A node of a cluster that runs tasks, reduced to its leases, its journal and its task queue,
its wall clock AHEAD_S seconds ahead: ``python tests/actors/tasks/clock_node.py DSN NAME LOG
AHEAD_S [--wall]``. It waits until it holds every shard, writes one JSON line with its two clocks
(``wall_ms``: its own, ``db_ms``: the database's as its lease keeper tells it) to LOG, then runs
the task queue on the database's clock (with ``--wall``: on its own wall clock, as every node did
before) until SIGTERM or SIGINT.

Its wall clock is moved one of two ways. Started under libfaketime (tests/faketime.py, AHEAD_S
0), the whole process's ``CLOCK_REALTIME`` runs ahead, whoever reads it. With AHEAD_S not 0 it
is moved here, before the node starts (``time.time`` and ``time.time_ns``: reel reads its wall
clock through these two), which needs no preload.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

from actors.io_loop import IoLoop
from actors.tasks.queue import TaskQueue, TasksConfig
from actors.tasks.store import now_ms
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseKeeper, LeaseSettings

TASKS = TasksConfig(workers=1, heartbeat_s=0.2, lease_s=1.0)


def main(argv: list[str]) -> int:
    dsn, name, log, ahead, *rest = argv
    if float(ahead):
        wall, wall_ns = time.time, time.time_ns
        time.time = lambda: wall() + float(ahead)
        time.time_ns = lambda: wall_ns() + int(float(ahead) * 1e9)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    keeper = LeaseKeeper(dsn, name, settings=LeaseSettings(ttl_s=2.0, ready_ticks=0))
    keeper.start()
    while len(keeper.owned()) < keeper.shards:
        time.sleep(0.05)
    journal = PostgresJournal(dsn, node=name, leases=keeper)
    io = IoLoop()
    queue = TaskQueue(journal, io, TASKS, clock=now_ms if "--wall" in rest else keeper.database_ms)
    clocks = {"wall_ms": now_ms(), "db_ms": keeper.database_ms()}
    Path(log).write_text(json.dumps(clocks) + "\n")
    queue.start()
    stop.wait()
    queue.stop()
    journal.close()
    keeper.drain()
    io.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
