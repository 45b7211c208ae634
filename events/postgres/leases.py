"""A node's leases on shards of the PostgreSQL journal (issue 24, step 2; docs/scale-out.md).

Liveness is one ``nodes`` row per node, renewed every tick (TTL / 4) on the **database** clock:
``expires_at = clock_timestamp() + TTL``, and only while the row has not lapsed. A shard's lease
(``shard_lease``) names a node and its incarnation; it is live exactly while that node's row is
live with that incarnation, so one renewal keeps every shard the node holds. Acquiring a free
shard (no node, or one whose row lapsed or was replaced by a restart) bumps its fencing token in
the statement that takes it, and ``shard_append`` refuses any other token, and any append whose
lease's node row has lapsed: whatever a former owner still has in flight is refused inside the
database.

Self-fencing runs on the node's **monotonic** clock: a renewal sent at ``t`` makes the node's
deadline ``t + TTL - margin``; past it, :meth:`LeaseKeeper.token` refuses every shard
(:class:`events.ShardNotOwned`), whether the database is reachable or not, a renewal in flight or
not. The database cannot have expired the row before ``t + TTL`` (it stamps the expiry after it
received the renewal), so the node stops before its lease can lapse. A renewal that finds the
row lapsed means the node was frozen or cut off past its TTL: it drops every shard and registers
again as a new incarnation.

Placement (:mod:`events.postgres.placement`) runs every tick over the nodes that are live and
*ready* (renewed ``ready_ticks`` healthy ticks in a row: a node back from a pause gets shards
only after that). A node acquires the free shards placed on it, verifies each
one's chain from its last signed head (:func:`events.postgres.verify.verify_shard`) and only
then calls ``on_acquired``
(where a node recovers what the shard holds) and appends to it. It hands over one shard per tick
whose target is another node (a join rebalances gradually). :meth:`LeaseKeeper.drain` expires
the node's row, freeing every shard it holds at once, so the targets take the shards on their
next tick instead of after the TTL.

The integrity chain (shard -1: super-checkpoints, :mod:`events.postgres.checkpoints`) is not
placed: a keeper made with ``integrity=True`` (a node that signs) takes it whenever it is free,
and holds it like any shard until it drains, lapses or dies: the cluster's checkpointer.

**Named singletons** (the watchdog, each channel connector: work one node of the cluster runs)
are leases of the same kind in the ``singletons`` table: :meth:`LeaseKeeper.want_singleton`
names one, and every tick a *ready* node that wants a free one takes it (first come, not
placed), its token bumped. It is live while the node's row is (the one renewal keeps it),
fenced on the same monotonic deadline (:meth:`LeaseKeeper.holds` is false past it), and freed
by :meth:`LeaseKeeper.drain`. ``on_lost`` tells the holder to stop when it is released, fenced
or found lapsed; the holder asks :meth:`LeaseKeeper.holds` before each thing it does, since a
frozen node runs again before its tick thread has noticed.

Everything that changes what the node believes it owns is reported to ``on_change`` with the
monotonic time it took effect (the 3-process tests check from these that no two nodes ever
believed they owned one shard at once).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import msgspec
import psycopg

from events.errors import JournalError, JournalLocked, ShardNotOwned
from events.postgres.database import connect, failures, safe_dsn, shard_count, upgrade
from events.postgres.placement import place
from events.postgres.schema import INTEGRITY_SHARD
from events.postgres.verify import verify_shard

log = logging.getLogger(__name__)

Change = Literal["acquired", "released", "fenced", "lapsed", "refused", "renewed"]


class LeaseSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How long a node's lease on life lasts and how often it is renewed."""

    ttl_s: float = 5.0
    """How long a renewal keeps the node's shards, on the database clock (tests: 2 s)."""
    ready_ticks: int = 3
    """Healthy renewals in a row before a node (new, restarted or back from a pause) is given
    shards."""
    handover_wait_s: float = 60.0
    """How long a shard placed on another node (a join rebalancing) stays while it has work in
    flight here; then it is handed over anyway (the new owner ends or resumes that work)."""

    @property
    def tick_s(self) -> float:
        """How often the node renews and places: a quarter of the TTL."""
        return self.ttl_s / 4

    @property
    def margin_s(self) -> float:
        """How long before its lease could lapse a node fences itself: a fifth of the TTL
        (room for the two clocks' rates to differ and for the statement in flight)."""
        return self.ttl_s / 5


class LeaseChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change to what a node believes it owns (or a renewal), as ``on_change`` hears it."""

    change: Change
    at: float
    """``time.monotonic()`` when it took effect (for ``fenced``: the deadline that passed)."""
    incarnation: int
    shard: int | None = None
    singleton: str | None = None
    """For a named singleton's change: its name (``shard`` is then ``None``)."""
    token: int | None = None
    deadline: float | None = None
    """For ``renewed``: the new monotonic deadline."""
    expires_at_ms: int | None = None
    """For ``renewed``: the database's new ``expires_at`` (epoch ms, its clock)."""
    reason: str = ""


_REGISTER = (
    "INSERT INTO nodes(node, incarnation, expires_at, address, public_key, config_hash) "
    "VALUES (%(node)s, 1, clock_timestamp() + %(ttl)s * interval '1 second', %(address)s, "
    "%(public_key)s, %(config_hash)s) "
    "ON CONFLICT (node) DO UPDATE SET incarnation = nodes.incarnation + 1, "
    "expires_at = excluded.expires_at, ready = false, address = excluded.address, "
    "public_key = excluded.public_key, config_hash = excluded.config_hash, "
    "started_at = clock_timestamp() WHERE nodes.expires_at <= clock_timestamp() "
    "RETURNING incarnation"
)
_RENEW = (
    "UPDATE nodes SET expires_at = clock_timestamp() + %(ttl)s * interval '1 second', "
    "ready = %(ready)s "
    "WHERE node = %(node)s AND incarnation = %(inc)s AND expires_at > clock_timestamp() "
    "RETURNING (extract(epoch FROM expires_at) * 1000)::bigint"
)
_OTHER_CONFIGS = (
    "SELECT node, config_hash FROM nodes WHERE expires_at > clock_timestamp() "
    "AND node <> %(node)s AND config_hash <> '' AND config_hash <> %(config_hash)s ORDER BY node"
)
_TARGETS = "SELECT node FROM nodes WHERE expires_at > clock_timestamp() AND ready"
_LEASES = (
    "SELECT l.shard, l.node, l.incarnation, l.token, n.node IS NOT NULL FROM shard_lease l "
    "LEFT JOIN nodes n ON n.node = l.node AND n.incarnation = l.incarnation "
    "AND n.expires_at > clock_timestamp() ORDER BY l.shard"
)
_ACQUIRE = (
    "UPDATE shard_lease l SET node = %(node)s, incarnation = %(inc)s, token = l.token + 1 "
    "WHERE l.shard = %(shard)s AND NOT EXISTS (SELECT 1 FROM nodes o WHERE o.node = l.node "
    "AND o.incarnation = l.incarnation AND o.expires_at > clock_timestamp()) "
    "AND EXISTS (SELECT 1 FROM nodes m WHERE m.node = %(node)s AND m.incarnation = %(inc)s "
    "AND m.expires_at > clock_timestamp()) RETURNING l.token"
)
_RELEASE = (
    "UPDATE shard_lease SET node = NULL, token = token + 1 "
    "WHERE shard = %(shard)s AND node = %(node)s AND incarnation = %(inc)s AND token = %(token)s"
)
_SINGLETONS = (
    "SELECT s.name, s.token, n.node IS NOT NULL AND s.node = %(node)s "
    "AND s.incarnation = %(inc)s, n.node IS NOT NULL FROM singletons s "
    "LEFT JOIN nodes n ON n.node = s.node AND n.incarnation = s.incarnation "
    "AND n.expires_at > clock_timestamp() WHERE s.name = ANY(%(names)s)"
)
_TAKE_SINGLETON = (
    "INSERT INTO singletons AS s(name, node, incarnation, token) "
    "SELECT %(name)s, %(node)s, %(inc)s, 1 WHERE EXISTS (SELECT 1 FROM nodes m "
    "WHERE m.node = %(node)s AND m.incarnation = %(inc)s AND m.expires_at > clock_timestamp() "
    "AND m.ready) "
    "ON CONFLICT (name) DO UPDATE SET node = excluded.node, "
    "incarnation = excluded.incarnation, token = s.token + 1 "
    "WHERE NOT EXISTS (SELECT 1 FROM nodes o WHERE o.node = s.node "
    "AND o.incarnation = s.incarnation AND o.expires_at > clock_timestamp()) RETURNING s.token"
)
_FREE_SINGLETON = (
    "UPDATE singletons SET node = NULL, token = token + 1 WHERE name = %(name)s "
    "AND node = %(node)s AND incarnation = %(inc)s AND token = %(token)s"
)
_NOW = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
_LEAVE = (
    "UPDATE nodes SET expires_at = clock_timestamp() "
    "WHERE node = %(node)s AND incarnation = %(inc)s"
)


class Singleton(NamedTuple):
    """What a node does when it gains or loses a named singleton (``want_singleton``)."""

    on_gained: Callable[[int], None] | None
    on_lost: Callable[[Change], None] | None


class LeaseKeeper:
    """The leases one node holds on shards of the journal in the database ``dsn`` names.

    :meth:`start` registers the node (a new incarnation; it waits while a live row of the same
    name exists, one TTL at most after that process died) and starts the tick thread.
    :meth:`token` is what a writer asks before every append; :meth:`drain` hands every shard
    over and leaves; :meth:`stop` stops renewing (the leases then lapse after the TTL).
    """

    def __init__(
        self,
        dsn: str,
        node: str,
        *,
        settings: LeaseSettings | None = None,
        on_acquired: Callable[[int, int], None] | None = None,
        on_change: Callable[[LeaseChange], None] | None = None,
        busy: Callable[[int], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        integrity: bool = False,
        address: str = "",
        public_key: bytes = b"",
        config_hash: str = "",
    ) -> None:
        """``address`` (``host:port``), ``public_key`` and ``config_hash``: where this node's
        internal service listens, the key it signs forwarded commands with and the digest of
        its shared config, published in its ``nodes`` row for the other nodes
        (:mod:`transports.cluster`); empty for a keeper that serves none."""
        if not node or "\x00" in node:
            raise JournalError("node: a lease keeper needs a node name without NUL")
        self.dsn = dsn
        self.node = node
        self.settings = settings or LeaseSettings()
        self._on_acquired = on_acquired
        self._on_change = on_change
        self._busy = busy
        """Whether a shard placed on another node has work in flight here (a live run): it
        is handed over once that ends, or after ``handover_wait_s`` regardless."""
        self._moving_since: dict[int, float] = {}
        self._clock = clock
        self.address = address
        self.public_key = public_key
        self.config_hash = config_hash
        self._integrity = integrity
        """Whether this node takes the integrity chain (shard -1) when it is free: a node that
        signs super-checkpoints (:mod:`events.postgres.journal`). Not placed: the first ready
        such node to find it free takes it and keeps it until it drains, lapses or dies (a
        named singleton lease), so the checkpointer moves only when it must."""
        self._lock = threading.Lock()
        self._owned: dict[int, int] = {}
        self._deadline = float("-inf")
        self._incarnation = 0
        self._healthy = 0
        self.renewals = 0
        """Successful renewals since the keeper started (``/metrics``)."""
        self._stamp: tuple[int, float] | None = None
        """The database's clock at the last renewal (epoch ms) and the monotonic time its answer
        arrived (:meth:`database_ms`)."""
        self._wanted: dict[str, Singleton] = {}
        self._singletons: dict[str, int] = {}
        """The named singletons this node holds, with their tokens."""
        self._given_back: dict[str, int] = {}
        """Singletons whose work could not start here, with their tokens: freed by the next
        tick (:meth:`give_back`)."""
        self._paused: dict[str, float] = {}
        """Singletons this node does not take again before the time given (after a give-back)."""
        self._refused: set[int] = set()
        """Shards whose chain failed verification here: not tried again by this incarnation."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        upgrade(dsn)
        self._conn = self._connect()
        self.shards = shard_count(self._conn, dsn)

    def _connect(self) -> psycopg.Connection[Any]:
        """The keeper's connection: no statement of it may outlast a TTL."""
        conn = connect(self.dsn)
        with failures(self.dsn):
            conn.execute(
                "SELECT set_config('statement_timeout', %s, false)",
                (f"{int(self.settings.ttl_s * 1000)}ms",),
            )
        return conn

    # --- what a writer asks -------------------------------------------------------------

    def token(self, shard: int) -> int:
        """The fencing token to append to ``shard`` with, or :class:`ShardNotOwned` when this
        node holds no live lease on it (not acquired, handed over, or past its deadline)."""
        with self._lock:
            token = self._owned.get(shard)
            if token is not None and self._clock() < self._deadline:
                return token
        raise ShardNotOwned(
            f"journal {safe_dsn(self.dsn)}: node {self.node} holds no live lease on shard {shard}"
        )

    def owned(self) -> dict[int, int]:
        """The data shards this node may append to now, with their tokens (the integrity
        chain, shard -1, is asked for with :meth:`token`)."""
        with self._lock:
            if self._clock() >= self._deadline:
                return {}
            return {s: t for s, t in self._owned.items() if s != INTEGRITY_SHARD}

    @property
    def incarnation(self) -> int:
        return self._incarnation

    @property
    def deadline(self) -> float:
        """The monotonic time this node's shards are fenced at unless a renewal comes first."""
        return self._deadline

    # --- named singletons ---------------------------------------------------------------

    def want_singleton(
        self,
        name: str,
        *,
        on_gained: Callable[[int], None] | None = None,
        on_lost: Callable[[Change], None] | None = None,
    ) -> None:
        """Take the singleton ``name`` whenever it is free and this node is ready (before
        :meth:`start` or any time after). ``on_gained(token)`` and ``on_lost(change)`` run on the
        tick thread, so they must return at once (start or stop the work on a thread of its
        own): ``on_gained`` once the lease is held (:meth:`holds` is true inside it); if it
        raises the singleton is released. ``on_lost`` when it is released (drain, stop),
        ``fenced`` (no renewal before the deadline) or ``lapsed`` (the database says another
        holds it), each time after an ``on_gained``."""
        if not name or "\x00" in name:
            raise JournalError("name: a singleton needs a name without NUL")
        with self._lock:
            self._wanted[name] = Singleton(on_gained, on_lost)

    def give_back(self, name: str, token: int, pause_s: float) -> None:
        """Free the singleton ``name`` held here under ``token`` (the next tick does it), and
        take it again no sooner than ``pause_s`` from now: its work could not start here
        (started on a thread of its own, after ``on_gained`` returned), so another node may
        try. ``on_lost`` is not called (nothing runs). Any thread; returns at once."""
        with self._lock:
            if self._singletons.get(name) == token:
                self._given_back[name] = token
            self._paused[name] = self._clock() + pause_s

    def holds(self, name: str) -> bool:
        """Whether this node holds the singleton ``name`` now: taken, and its deadline not yet
        passed (whether or not the tick thread has noticed). Asked before each thing a
        singleton's holder does."""
        with self._lock:
            return name in self._singletons and self._clock() < self._deadline

    def wanted(self) -> list[str]:
        """The named singletons this node takes whenever they are free (``/metrics``)."""
        with self._lock:
            return sorted(self._wanted)

    def singletons(self) -> list[str]:
        """The named singletons this node holds now (``/metrics``)."""
        with self._lock:
            if self._clock() >= self._deadline:
                return []
            return sorted(self._singletons)

    # --- the database's clock -----------------------------------------------------------

    def database_ms(self) -> int:
        """Now on the database's clock (epoch ms), without a statement: the time the last
        renewal was stamped with, plus the monotonic time since its answer arrived. Never
        ahead of the database (the stamp was taken before the answer left), behind by at most
        the renewal's round trip; a node's own wall clock plays no part, so a node whose clock
        is wrong decides lease expiries (the task queue's) as the others do. Before the first
        renewal it asks the database."""
        with self._lock:
            stamp = self._stamp
        if stamp is None:
            with connect(self.dsn) as conn, failures(self.dsn):
                row = conn.execute(_NOW).fetchone()
            return int(row[0]) if row else 0
        at_ms, received = stamp
        return at_ms + int((self._clock() - received) * 1000)

    # --- life cycle ---------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Register this node and start ticking. While another process's row of the same name
        is live this waits (up to ``timeout``, by default one TTL and a tick), then raises
        :class:`events.JournalLocked`."""
        limit = self._clock() + (
            timeout if timeout is not None else self.settings.ttl_s + self.settings.tick_s
        )
        while not self.register():
            if self._clock() >= limit:
                raise JournalLocked(
                    f"journal {safe_dsn(self.dsn)}: node name {self.node} is live in another "
                    "process (each node needs a name of its own)",
                    None,
                )
            time.sleep(self.settings.tick_s / 2)
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def drain(self) -> None:
        """Hand every shard over and leave: stop ticking and appending, then expire the node's
        row in one statement, which frees every shard it holds at once (``shard_append``
        refuses an append in flight from then on; the next owner bumps each token). The other
        nodes acquire the shards on their next tick, instead of a TTL later."""
        self._halt()
        with self._lock:
            owned, self._owned = dict(self._owned), {}
        now = self._clock()
        for shard, token in sorted(owned.items()):
            self._emit("released", at=now, shard=shard, token=token, reason="drain")
        self._lose_singletons("released", reason="drain")
        with contextlib.suppress(JournalError):  # unreachable: the TTL frees them instead
            self._sql(_LEAVE, {"node": self.node, "inc": self._incarnation})
        self._close()

    def stop(self) -> None:
        """Stop ticking without handing anything over (the shards wait out the TTL)."""
        self._halt()
        with self._lock:
            self._owned = {}
        self._lose_singletons("released", reason="stop")
        self._close()

    def _halt(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    # --- the tick thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            started = self._clock()
            try:
                self.tick()
            except (JournalError, psycopg.Error) as exc:  # the database away: fence on time
                log.warning("lease tick failed: %s", " ".join(str(exc).split()))
                with self._lock:
                    self._healthy = 0  # ready again only after ready_ticks good ones
            next_tick = started + self.settings.tick_s
            with self._lock:
                held = self._owned or self._singletons
                wake = min(next_tick, self._deadline) if held else next_tick
            if self._stop.wait(max(0.0, wake - self._clock())):
                return
            self._fence_if_late()

    def tick(self) -> None:
        """One round: fence if late, renew, place, acquire and hand over."""
        self._fence_if_late()
        if not self._renew():
            return
        self._place()
        self._tend_singletons()

    def _fence_if_late(self) -> None:
        self._fence_singletons_if_late()
        with self._lock:
            if not self._owned or self._clock() < self._deadline:
                return
            owned, self._owned = self._owned, {}
            deadline = self._deadline
        for shard, token in sorted(owned.items()):
            self._emit(
                "fenced",
                at=deadline,
                shard=shard,
                token=token,
                reason="no renewal before the deadline",
            )

    def other_configs(self) -> list[tuple[str, str]]:
        """The live nodes but this one whose ``config_hash`` is another than this node's, with
        theirs (a node that publishes none is not counted)."""
        rows = self._sql(_OTHER_CONFIGS, {"node": self.node, "config_hash": self.config_hash})
        return [(str(node), str(digest)) for node, digest in rows]

    def register(self) -> bool:
        """Register a new incarnation of this node (its earlier one's leases die with it);
        ``False`` while another process's row of the same name is live. :meth:`start` does
        this; a test that ticks by hand calls it itself."""
        rows = self._sql(
            _REGISTER,
            {
                "node": self.node,
                "ttl": self.settings.ttl_s,
                "address": self.address,
                "public_key": self.public_key,
                "config_hash": self.config_hash,
            },
        )
        if not rows:
            return False
        with self._lock:
            self._incarnation = int(rows[0][0])
            self._healthy = 0
        return True

    def _renew(self) -> bool:
        sent = self._clock()
        ready = self._healthy >= self.settings.ready_ticks
        rows = self._sql(
            _RENEW,
            {
                "node": self.node,
                "inc": self._incarnation,
                "ttl": self.settings.ttl_s,
                "ready": ready,
            },
        )
        if not rows:  # lapsed (frozen or cut off past the TTL) or replaced: start again
            with self._lock:
                owned, self._owned = self._owned, {}
                self._deadline = float("-inf")
            now = self._clock()
            for shard, token in sorted(owned.items()):
                self._emit("lapsed", at=now, shard=shard, token=token)
            self._lose_singletons("lapsed")
            self.register()
            return False
        deadline = sent + self.settings.ttl_s - self.settings.margin_s
        stamped = int(rows[0][0]) - round(self.settings.ttl_s * 1000), self._clock()
        with self._lock:  # a renewal sent past the deadline starts the healthy count again
            self._stamp = stamped
            self._healthy = self._healthy + 1 if sent < self._deadline else 1
            self._deadline = deadline
            self.renewals += 1
        self._emit("renewed", at=self._clock(), deadline=deadline, expires_at_ms=int(rows[0][0]))
        return True

    def _place(self) -> None:
        ready = [str(r[0]) for r in self._sql(_TARGETS)]
        targets = place(self.shards, ready)
        if self._integrity and self.node in ready:
            targets[INTEGRITY_SHARD] = self.node  # whoever finds it free first
        leases = self._sql(_LEASES)
        mine = {
            int(shard)
            for shard, node, incarnation, _, live in leases
            if live and node == self.node and int(incarnation) == self._incarnation
        }
        with self._lock:
            lost = {s: t for s, t in self._owned.items() if s not in mine}
            for shard in lost:
                del self._owned[shard]
            unused = {s: t for s, _, _, t, _ in leases if s in mine and s not in self._owned}
        for shard, token in sorted(lost.items()):  # taken by someone (our row was replaced)
            self._emit("lapsed", at=self._clock(), shard=shard, token=token)
        for shard, token in sorted(unused.items()):
            # Ours in the database but fenced here (a renewal came late, or verifying outlasted
            # the deadline): freed with its token bumped, and placed again like any free shard.
            self._free(shard, token)
        for shard, _node, _incarnation, _token, live in leases:
            free = not live or shard in unused
            if free and targets.get(shard) == self.node and shard not in self._refused:
                if self._clock() + self.settings.tick_s >= self._deadline:
                    break  # too close to fencing to take on more
                self._acquire(shard)
        now = self._clock()
        moving = {
            s: t for s in sorted(self.owned()) if (t := targets.get(s)) not in (None, self.node)
        }
        self._moving_since = {s: self._moving_since.get(s, now) for s in moving}
        for shard, target in moving.items():
            waited = now - self._moving_since[shard]
            if (
                self._busy is not None
                and self._busy(shard)
                and waited < self.settings.handover_wait_s
            ):
                continue  # its runs finish here first (a join must not cut them off)
            self._release(shard, f"placed on {target}")
            break  # one at a time

    def _acquire(self, shard: int) -> None:
        rows = self._sql(_ACQUIRE, {"node": self.node, "inc": self._incarnation, "shard": shard})
        if not rows:
            return  # taken by another node first, or our own row lapsed meanwhile
        token = int(rows[0][0])
        with failures(self.dsn, "cannot verify"):
            fault = verify_shard(self._conn, self.shards, shard)
        if fault is not None:
            log.error(
                "shard %d refused: its chain fails verification (%s: %s)",
                shard,
                fault.kind,
                fault.message,
            )
            self._refused.add(shard)
            self._emit(
                "refused",
                at=self._clock(),
                shard=shard,
                token=token,
                reason=f"{fault.kind}: {fault.message}",
            )
            self._free(shard, token)
            return
        if self._on_acquired is not None:
            try:
                self._on_acquired(shard, token)
            except Exception as exc:  # recovery failed: not ours to append to; another may try
                log.error("shard %d freed: its recovery at acquisition failed: %r", shard, exc)
                self._free(shard, token)
                return
        with self._lock:
            at = self._clock()
            late = at >= self._deadline
            if not late:
                self._owned[shard] = token
        if late:  # fenced while verifying: the next tick frees it (``unused``)
            return
        self._emit("acquired", at=at, shard=shard, token=token)

    def _release(self, shard: int, reason: str) -> None:
        with self._lock:
            token = self._owned.pop(shard, None)
        if token is None:
            return
        self._emit("released", at=self._clock(), shard=shard, token=token, reason=reason)
        self._free(shard, token)

    def _free(self, shard: int, token: int) -> None:
        """Free ``shard`` in the database, its token bumped (only while ``token`` is ours)."""
        self._sql(
            _RELEASE, {"node": self.node, "inc": self._incarnation, "shard": shard, "token": token}
        )

    # --- the tick's named singletons --------------------------------------------------------

    def _tend_singletons(self) -> None:
        """Drop what the database says is no longer ours, free what is ours there but fenced
        here, and take every wanted singleton that is free (the statement checks that this
        node's row is live and ready, and that no live node holds it)."""
        with self._lock:
            wanted = sorted(self._wanted)
            given_back, self._given_back = self._given_back, {}
            for name, token in given_back.items():
                if self._singletons.get(name) == token:
                    del self._singletons[name]
        for name, token in sorted(given_back.items()):
            self._emit("released", at=self._clock(), singleton=name, token=token, reason="failed")
            self._free_singleton(name, token)
        if not wanted:
            return
        rows = self._sql(
            _SINGLETONS, {"names": wanted, "node": self.node, "inc": self._incarnation}
        )
        found = {
            str(name): (int(token), bool(mine), bool(live)) for name, token, mine, live in rows
        }
        with self._lock:
            lost = {n: t for n, t in self._singletons.items() if n not in found or not found[n][1]}
            for name in lost:
                del self._singletons[name]
            unused = {
                n: t for n, (t, mine, _) in found.items() if mine and n not in self._singletons
            }
        for name, token in sorted(lost.items()):  # taken by someone (our row was replaced)
            self._lose_singleton(name, token, "lapsed", at=self._clock())
        for name, token in sorted(unused.items()):  # ours there, fenced here: freed, taken again
            self._free_singleton(name, token)
        for name in wanted:
            live = found.get(name, (0, False, False))[2]
            if live and name not in unused:
                continue  # held, here or elsewhere
            if self._clock() < self._paused.get(name, float("-inf")):
                continue  # given back: another node's turn to try
            if self._clock() + self.settings.tick_s >= self._deadline:
                break  # too close to fencing to take on more
            self._take_singleton(name)

    def _take_singleton(self, name: str) -> None:
        rows = self._sql(
            _TAKE_SINGLETON, {"name": name, "node": self.node, "inc": self._incarnation}
        )
        if not rows:
            return  # taken by another node first, or this one is not ready or lapsed meanwhile
        token = int(rows[0][0])
        with self._lock:
            at = self._clock()
            late = at >= self._deadline
            if not late:
                self._singletons[name] = token
            wanted = self._wanted[name]
        if late:  # fenced meanwhile: the next tick frees it (``unused``)
            return
        self._emit("acquired", at=at, singleton=name, token=token)
        if wanted.on_gained is None:
            return
        try:
            wanted.on_gained(token)
        except Exception as exc:  # its holder could not start: not ours; another may try
            log.error("singleton %s released: starting it failed: %r", name, exc)
            with self._lock:
                self._singletons.pop(name, None)
            self._emit("released", at=self._clock(), singleton=name, token=token, reason=repr(exc))
            self._free_singleton(name, token)

    def _free_singleton(self, name: str, token: int) -> None:
        """Free ``name`` in the database, its token bumped (only while ``token`` is ours)."""
        self._sql(
            _FREE_SINGLETON,
            {"name": name, "node": self.node, "inc": self._incarnation, "token": token},
        )

    def _fence_singletons_if_late(self) -> None:
        with self._lock:
            if not self._singletons or self._clock() < self._deadline:
                return
            held, self._singletons = self._singletons, {}
            deadline = self._deadline
        for name, token in sorted(held.items()):
            self._lose_singleton(
                name, token, "fenced", at=deadline, reason="no renewal before the deadline"
            )

    def _lose_singletons(self, change: Change, reason: str = "") -> None:
        with self._lock:
            held, self._singletons = self._singletons, {}
        now = self._clock()
        for name, token in sorted(held.items()):
            self._lose_singleton(name, token, change, at=now, reason=reason)

    def _lose_singleton(
        self, name: str, token: int, change: Change, *, at: float, reason: str = ""
    ) -> None:
        """Report the loss of ``name`` (already forgotten here) and tell its holder to stop."""
        self._emit(change, at=at, singleton=name, token=token, reason=reason)
        with self._lock:
            wanted = self._wanted.get(name)
        if wanted is not None and wanted.on_lost is not None:
            try:
                wanted.on_lost(change)
            except Exception:  # a faulty holder must not stop the leases
                log.exception("singleton %s: its on_lost failed", name)

    # --- plumbing -----------------------------------------------------------------------

    def _sql(self, sql: str, args: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        if self._conn.broken or self._conn.closed:
            self._conn = self._connect()
        with failures(self.dsn):
            cursor = self._conn.execute(sql, args)
            return cursor.fetchall() if cursor.description is not None else []

    def _emit(self, change: Change, *, at: float, **fields: Any) -> None:
        if self._on_change is not None:
            event = LeaseChange(change=change, at=at, incarnation=self._incarnation, **fields)
            with contextlib.suppress(Exception):  # a faulty listener must not stop the leases
                self._on_change(event)
