"""The shards this node owns and has recovered: the only ones it runs commands for.

The lease keeper (:mod:`events.postgres.leases`) decides what the node holds; this turns its
reports into the actor system's state, in order, on one thread of its own (the keeper's tick
never waits on an actor):

* a shard acquired is recovered as a crash recovery would (:meth:`actors.system.node.Node.
  recover_shards`: runs the old owner left in flight end ``interrupted`` or resume their wait
  for a human; the directory learns the shard's sessions and keys), and only then is it
  *ready*: the router sends its commands here;
* a shard lost (handed over, fenced at the node's deadline, found taken, refused) stops being
  ready at once, then its sessions' and runs' actors are stopped where they stand (their
  appends would be refused anyway: the new owner recovers what they left).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

from events import StoredEvent, new_id
from events.postgres.homes import shard_of
from transports.cluster.targets import key_shard

if TYPE_CHECKING:
    from actors.system.node import Node
    from events.postgres.leases import LeaseChange, LeaseKeeper

log = logging.getLogger("reel.cluster")

LOSSES = frozenset({"released", "fenced", "lapsed", "refused"})
"""The lease changes after which this node no longer holds a shard."""

_STOP = ("stop", -1)


class Membership:
    """What a cluster node owns and serves; the keeper's ``on_acquired``/``on_change``."""

    def __init__(self) -> None:
        self.shards = 1
        self.keeper: LeaseKeeper | None = None
        """Both set once the keeper exists (it is made with this object's callbacks)."""
        self._node: Node | None = None
        self._ready: set[int] = set()
        self._lock = threading.Lock()
        self._work: queue.SimpleQueue[tuple[str, int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    # --- the keeper's reports (its tick thread) ----------------------------------------------

    def on_acquired(self, shard: int, _token: int) -> None:
        if shard >= 0:  # the integrity chain holds no session
            self._work.put(("acquired", shard))

    def on_change(self, change: LeaseChange) -> None:
        if change.change in LOSSES and change.shard is not None and change.shard >= 0:
            with self._lock:
                self._ready.discard(change.shard)  # at once: no command routed here from now
            self._work.put(("lost", change.shard))

    # --- what the router asks ------------------------------------------------------------

    def ready(self) -> frozenset[int]:
        """The shards whose commands run here now: recovered, and held with a live lease."""
        owned = self.keeper.owned() if self.keeper is not None else {}
        with self._lock:
            return frozenset(s for s in self._ready if s in owned)

    def busy(self, shard: int) -> bool:
        """Whether a run of ``shard`` is working here now (the keeper then waits before
        handing it over); a run waiting for a human is not: its wait resumes on the new owner."""
        node = self._node
        if node is None:
            return False
        registry = node.services.registry
        live = registry.live_runs_where(lambda s: shard_of(s, self.shards) == shard)
        return bool(live.keys() - registry.runs_awaiting_approval())

    def serves(self, stored: StoredEvent) -> bool:
        """Whether a row is in a shard this node serves now (its run is this node's)."""
        return stored.shard in self.ready()

    def new_session_id(self, key: str | None) -> str:
        """The id of a session this node creates: in ``key``'s shard when it has a key (the
        router sent it here as that shard's owner), else in a shard this node serves."""
        wanted = {key_shard(key, self.shards)} if key is not None else set(self.ready())
        while True:
            session_id = new_id()
            if not wanted or shard_of(session_id, self.shards) in wanted:
                return session_id

    # --- life cycle ------------------------------------------------------------------------

    def start(self, node: Node) -> None:
        """Act on the keeper's reports from now on (those queued since it started first)."""
        self._node = node
        self._thread = threading.Thread(target=self._run, name="cluster-membership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop acting on reports (before the node stops)."""
        if self._thread is not None:
            self._work.put(_STOP)
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        while True:
            batch = [self._work.get()]
            while True:
                try:
                    batch.append(self._work.get_nowait())
                except queue.Empty:
                    break
            recover: set[int] = set()
            drop: set[int] = set()
            for what, shard in batch:
                if (what, shard) == _STOP:
                    return
                if what == "acquired":
                    recover.add(shard)
                else:  # dropped even when acquired again in this batch (a lease lapsed and
                    # taken anew): what ran under the old token stops before the recovery
                    drop.add(shard)
                    recover.discard(shard)
            try:
                self._act(recover, drop)
            except Exception as exc:  # the database away: try again while the shard is ours
                log.warning("shard recovery failed, retried in 1 s: %s", " ".join(str(exc).split()))
                time.sleep(1.0)
                for shard in recover:
                    self._work.put(("acquired", shard))

    def _act(self, recover: set[int], drop: set[int]) -> None:
        node, keeper = self._node, self.keeper
        assert node is not None and keeper is not None
        if drop:
            lost = frozenset(drop)
            node.release_shards(lambda session_id: shard_of(session_id, self.shards) in lost)
            log.info("shards %s left this node", sorted(lost))
        if not recover:
            return
        deadline = time.monotonic() + keeper.settings.tick_s
        while not recover <= keeper.owned().keys() and time.monotonic() < deadline:
            time.sleep(0.01)  # the keeper records a shard right after on_acquired returns
        held = recover & keeper.owned().keys()
        if not held:
            return
        report = node.recover_shards(held)
        with self._lock:
            self._ready |= held & keeper.owned().keys()
        log.info(
            "shards %s recovered: %d runs interrupted, %d resumed",
            sorted(held),
            len(report.interrupted_runs),
            len(report.resumed),
        )
