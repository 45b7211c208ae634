"""A node of a cluster, reduced to its journal: ``python -m tests.events.lease_node DSN NAME
TTL_S LOG [KEYS] [--want=SINGLETON ...]``. It holds leases
(:class:`events.postgres.leases.LeaseKeeper`), appends to every shard it believes it owns every
few milliseconds through the real :class:`PostgresJournal`, and writes one JSON line per lease
change and per append outcome to LOG (flushed at once: a test reads it while the node runs, or
after a SIGKILL). Given a directory KEYS, it signs: its key is ``KEYS/NAME.key``, its witness
``KEYS/NAME.witness``, and it takes the integrity chain (shard -1) when it is free, as the
cluster's checkpointer. Each ``--want=NAME`` makes it want the named singleton NAME: it logs
``gained`` and ``lost`` as its callbacks hear them, and while ``keeper.holds(NAME)`` a
``working`` line every few milliseconds (what a watchdog would do).

SIGUSR1 makes it behave as a zombie: it calls ``shard_append`` directly with every token it held
before, skipping its own fence, and logs what the database said. SIGINT or SIGTERM: the journal
closes (what is queued is written), the keeper drains, the process exits 0.

``reel node`` runs no cluster yet (commands for a shard another node owns need step 3's
forwarding): this is the part of a node step 2 builds, in a process of its own.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import IO, Any

import msgspec
import psycopg

from events.catalog import RunOutput
from events.checkpoint import NodeKey
from events.envelope import AppendResult
from events.errors import JournalError
from events.postgres.homes import shard_of
from events.postgres.journal import PostgresJournal
from events.postgres.leases import LeaseChange, LeaseKeeper, LeaseSettings
from events.witness import Witness
from tests.events.postgres_raw import raw_append

PAUSE_S = 0.1
WORK_S = 0.02
"""How often a singleton's holder works (logs ``working``)."""


def probe_streams(shards: int) -> dict[int, str]:
    """One stream name per shard, the same on every node."""
    streams: dict[int, str] = {}
    i = 0
    while len(streams) < shards:
        streams.setdefault(shard_of(f"probe/{i}", shards), f"probe/{i}")
        i += 1
    return streams


class LeaseNode:
    def __init__(
        self,
        dsn: str,
        name: str,
        ttl_s: float,
        out: IO[str],
        keys: Path | None = None,
        wants: tuple[str, ...] = (),
    ) -> None:
        self.dsn = dsn
        self.name = name
        self._out = out
        self._out_lock = threading.RLock()  # the zombie's signal handler may interrupt a write
        self.held: dict[tuple[int, int], int] = {}
        """Every (incarnation, shard) this process held, with the last token it held it by."""
        self.keeper = LeaseKeeper(
            dsn,
            name,
            settings=LeaseSettings(ttl_s=ttl_s, ready_ticks=2),
            on_change=self.change,
            integrity=keys is not None,
        )
        self.stopping = threading.Event()
        for singleton in wants:
            self.want(singleton)
        self.keeper.start()
        self.journal = PostgresJournal(
            dsn,
            node=name,
            leases=self.keeper,
            node_key=NodeKey.load_or_create(keys / f"{name}.key") if keys else None,
            witness=Witness.open(keys / f"{name}.witness") if keys else None,
        )
        self.streams = probe_streams(self.journal.shards)

    def write(self, **line: Any) -> None:
        with self._out_lock:
            self._out.write(json.dumps({"node": self.name, **line}) + "\n")
            self._out.flush()

    def change(self, change: LeaseChange) -> None:
        if change.change == "acquired" and change.shard is not None and change.token is not None:
            self.held[change.incarnation, change.shard] = change.token
        self.write(**msgspec.to_builtins(change))

    def want(self, singleton: str) -> None:
        """Want ``singleton``, and work while holding it, as a watchdog would."""

        def gained(token: int) -> None:
            self.write(change="gained", singleton=singleton, token=token, at=time.monotonic())

        def lost(change: str) -> None:
            self.write(change="lost", singleton=singleton, why=change, at=time.monotonic())

        def work() -> None:
            while not self.stopping.wait(WORK_S):
                # Held before and after the time is read: ``at`` lies inside the lease.
                if self.keeper.holds(singleton):
                    at = time.monotonic()
                    if self.keeper.holds(singleton):
                        self.write(change="working", singleton=singleton, at=at)

        self.keeper.want_singleton(singleton, on_gained=gained, on_lost=lost)
        threading.Thread(target=work, name=f"singleton-{singleton}", daemon=True).start()

    def run(self) -> None:
        while not self.stopping.is_set():
            pending: list[tuple[int, Future[AppendResult]]] = []
            principal = f"node:{self.name}:{self.keeper.incarnation}"
            for shard in sorted(self.keeper.owned()):
                event = RunOutput(run_id="probe", turn=0, text=self.name)
                try:
                    future = self.journal.submit(
                        self.streams[shard], [event], expected_seq=None, principal=principal
                    )
                except JournalError as exc:
                    self.write(change="append", shard=shard, error=type(exc).__name__)
                    continue
                pending.append((shard, future))
            for shard, future in pending:
                try:
                    future.result()
                except JournalError as exc:  # fenced: expected around a takeover
                    self.write(
                        change="append", shard=shard, at=time.monotonic(), error=type(exc).__name__
                    )
            time.sleep(PAUSE_S)
        self.journal.close()
        self.keeper.drain()
        self.write(change="drained", at=time.monotonic())

    def zombie(self, *_: Any) -> None:
        """Append with every token an earlier incarnation of this process held, as a process
        that missed its fence would."""
        now = self.keeper.incarnation
        for (incarnation, shard), token in sorted(self.held.items()):
            if incarnation >= now:
                continue
            try:
                raw_append(
                    self.dsn,
                    shard,
                    token,
                    stream=self.streams[shard],
                    principal=f"zombie:{self.name}",
                )
                outcome = "written"
            except psycopg.Error as exc:
                outcome = exc.sqlstate or "error"
            self.write(
                change="zombie", shard=shard, token=token, incarnation=incarnation, outcome=outcome
            )


def main(argv: list[str]) -> int:
    dsn, name, ttl, path, *rest = argv
    wants = tuple(a.removeprefix("--want=") for a in rest if a.startswith("--want="))
    keys = [a for a in rest if not a.startswith("--want=")]
    with open(path, "a", encoding="utf-8") as out:
        node = LeaseNode(dsn, name, float(ttl), out, Path(keys[0]) if keys else None, wants)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: node.stopping.set())
        signal.signal(signal.SIGUSR1, node.zombie)
        node.write(change="started", at=time.monotonic(), incarnation=node.keeper.incarnation)
        node.run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
