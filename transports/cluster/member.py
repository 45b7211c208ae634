"""A node's part in a cluster, composed: its lease keeper, its membership, the internal service
and the router (``[cluster]``; docs/scale-out.md).

The order is the composition's (:mod:`transports.runtime`): :class:`ClusterMember` binds the
internal port first (its address goes into the node's ``nodes`` row), :meth:`join` registers
the node and starts its leases before the journal opens with them, :meth:`serve` starts the
service and the router once the node and its views run; :meth:`stop_serving` before the node
stops, :meth:`leave` after the journal closed (what was queued is written, then every shard is
handed over at once).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from events.postgres.leases import LeaseKeeper, LeaseSettings
from transports.cluster.errors import ClusterStartError
from transports.cluster.membership import Membership
from transports.cluster.router import Router
from transports.cluster.service import ForwardService, close, serve
from transports.cluster.targets import ANY_SHARD, Target, target
from transports.config import ConfigError
from transports.listen import listening_socket

log = logging.getLogger("reel.cluster")

if TYPE_CHECKING:
    from grpclib.server import Server

    from actors.system.node import Node
    from events.checkpoint import NodeKey
    from events.postgres.journal import PostgresJournal
    from events.postgres.reader import Member
    from projections.records import ApprovalRecord
    from transports.config import ClusterConfig


class ClusterFigures(NamedTuple):
    """What ``/metrics`` shows of a cluster node."""

    held: int
    serving: int
    renewals: int
    seconds_left: float
    sent: int
    served: int
    singletons: tuple[str, ...]
    """The singletons this node holds."""
    wanted: tuple[str, ...]
    """The singletons this node takes when they are free (its watchdog, schedules, channels)."""
    horizon_lag_s: float
    """The age of the oldest write transaction open in the database."""
    follow_age_s: float
    """Seconds since this node last read the database's head (other nodes' commits)."""


class ClusterMember:
    """This node as one of a cluster."""

    def __init__(self, config: ClusterConfig, config_hash: str = "") -> None:
        """``config_hash``: the digest of this node's shared config and policies
        (:mod:`.config_hash`), published in its ``nodes`` row and compared at :meth:`join`."""
        self.config = config
        self.config_hash = config_hash
        self.sock = listening_socket(
            config.host, config.port, section="cluster", error=ClusterStartError
        )
        host = f"[{config.host}]" if ":" in config.host else config.host
        self.address = config.advertise or f"{host}:{self.sock.getsockname()[1]}"
        """Where the other nodes reach this one's internal service."""
        self.membership: Membership | None = None
        self.router: Router | None = None
        self.service: ForwardService | None = None
        self._keeper: LeaseKeeper | None = None
        self._server: Server | None = None
        self._node: Node | None = None
        self._journal: PostgresJournal | None = None
        self._singleton_work = ThreadPoolExecutor(1, thread_name_prefix="cluster-singletons")

    def join(self, dsn: str, key: NodeKey) -> LeaseKeeper:
        """Register this node and start its leases (it may wait out a TTL while its previous
        process's row lives): the journal opens with what this returns."""
        membership = Membership()
        keeper = LeaseKeeper(
            dsn,
            self.config.node,
            settings=LeaseSettings(ttl_s=self.config.ttl_s, ready_ticks=self.config.ready_ticks),
            on_acquired=membership.on_acquired,
            on_change=membership.on_change,
            busy=membership.busy,
            integrity=True,
            address=self.address,
            public_key=key.public_key,
            config_hash=self.config_hash,
        )
        differing = keeper.other_configs()
        if differing and not self.config.allow_config_change:
            keeper.stop()  # registered nothing, holds nothing
            other, theirs = differing[0]
            raise ConfigError(
                f"config key cluster.allow_config_change: node {other} runs another config or "
                f"policies (config_hash {theirs[:12]}, this node's {self.config_hash[:12]}); "
                "every node of a cluster runs the same (docs/scale-out.md)"
            )
        for other, theirs in differing:
            log.warning(
                "node %s runs another config or policies (config_hash %s, this node's %s): "
                "joining anyway (cluster.allow_config_change)",
                other,
                theirs[:12],
                self.config_hash[:12],
            )
        membership.shards, membership.keeper = keeper.shards, keeper
        self.membership, self._keeper = membership, keeper
        keeper.start()
        return keeper

    def serve(
        self,
        node: Node,
        journal: PostgresJournal,
        key: NodeKey,
        *,
        visible: Callable[[int, float], object],
        approval: Callable[[str], ApprovalRecord | None],
        here: Callable[[Any], Future[Any]] | None = None,
        running: Callable[[str], bool] = lambda _name: False,
    ) -> None:
        """Serve forwarded commands, route this node's own, and act on its leases from now on
        (the shards it acquired meanwhile are recovered first). ``approval(id)``: an
        approval's record (where its decision runs); ``here(command)``: runs a command on
        this node (default: the node's own directory; the composition adds the channels'
        requests); ``running(name)``: whether the work of singleton ``name`` runs here now
        (a channel's, whose requests then run here)."""
        membership, keeper = self.membership, self._keeper
        assert membership is not None and keeper is not None
        run_here = here or node.send_here

        def target_of(command: Any) -> Target:
            return target(command, journal, approval)

        def owner(where: Target) -> Member | None:
            if isinstance(where, str):
                return journal.singleton_holder(where)
            if where is ANY_SHARD:
                return journal.shard_owner(random.randrange(journal.shards))
            return journal.shard_owner(where)

        self.service = ForwardService(
            member=journal.member,
            target=target_of,
            ready=membership.ready,
            running=running,
            send=run_here,
            append=journal.submit_forwarded,
            position=lambda: journal.committed_position,
        )
        self._server = node.io.submit(serve(self.service, self.sock)).result(10)
        self.router = Router(
            node=node,
            membership=membership,
            keeper=keeper,
            key=key,
            here=run_here,
            running=running,
            append_here=journal.submit_forwarded,
            target=target_of,
            owner=owner,
            visible=visible,
        )
        node.services.new_session_id = membership.new_session_id
        node.router = self.router
        node.services.elsewhere = self.router.send
        journal.elsewhere = self.router.append_elsewhere
        self._node, self._journal = node, journal
        membership.start(node)

    @property
    def keeper(self) -> LeaseKeeper:
        """This node's lease keeper (once :meth:`join` made it)."""
        assert self._keeper is not None
        return self._keeper

    def run_while_held(
        self, name: str, start: Callable[[], object], stop: Callable[[], object]
    ) -> None:
        """Run ``start()`` whenever this node takes the singleton lease ``name``, ``stop()``
        whenever it loses it (handed over, fenced, lapsed): work one node of the cluster does
        for all (the watchdog, the schedules). Both run on one thread of their own, in order;
        the keeper's tick never waits for them. A ``start()`` that raises gives the lease
        back: another node may try, this one again after ``retry_start_s``."""
        keeper = self.keeper
        retry_s = self.config.retry_start_s

        def gained(token: int) -> None:
            def starting() -> None:
                if not _quietly(name, "start", start):
                    keeper.give_back(name, token, retry_s)

            with contextlib.suppress(RuntimeError):  # the node stops serving: nothing starts
                self._singleton_work.submit(starting)

        def lost(_change: object) -> None:
            with contextlib.suppress(RuntimeError):  # stopped already, with the node
                self._singleton_work.submit(_quietly, name, "stop", stop)

        keeper.want_singleton(name, on_gained=gained, on_lost=lost)

    def figures(self) -> ClusterFigures:
        keeper, membership, journal = self._keeper, self.membership, self._journal
        held = len(keeper.owned()) if keeper is not None else 0
        left = max(0.0, keeper.deadline - time.monotonic()) if keeper is not None else 0.0
        return ClusterFigures(
            held=held,
            serving=len(membership.ready()) if membership is not None else 0,
            renewals=keeper.renewals if keeper is not None else 0,
            seconds_left=left if held else 0.0,
            sent=self.router.forwarded if self.router is not None else 0,
            served=self.service.served if self.service is not None else 0,
            singletons=tuple(keeper.singletons()) if keeper is not None else (),
            wanted=tuple(keeper.wanted()) if keeper is not None else (),
            horizon_lag_s=journal.horizon_lag_s if journal is not None else 0.0,
            follow_age_s=time.monotonic() - journal.followed_at if journal is not None else 0.0,
        )

    def stop_serving(self) -> None:
        """Stop routing and serving (before the node stops: commands then meet its drain)."""
        node = self._node
        if node is None:
            self.sock.close()
            return
        node.router = None
        node.services.elsewhere = None
        if self._journal is not None:
            self._journal.elsewhere = None
        self._singleton_work.shutdown(wait=True)
        if self.membership is not None:
            self.membership.stop()
        server, router = self._server, self.router
        self._server = None
        if server is not None:
            node.io.submit(close(server)).result(10)
        if router is not None:
            node.io.submit(router.close()).result(10)

    def leave(self) -> None:
        """Hand every shard over (after the journal closed); without it they lapse in a TTL."""
        if self._keeper is not None:
            self._keeper.drain()


def _quietly(name: str, what: str, work: Callable[[], object]) -> bool:
    """A singleton's start or stop; a failure is logged (False), never kills the worker
    thread. A refusal the operator must act on (a ``ConfigError`` naming the key) is one line;
    anything else comes with its traceback."""
    try:
        work()
    except ConfigError as exc:
        log.error("the %s singleton's %s failed: %s", name, what, exc)
        return False
    except Exception:
        log.exception("the %s singleton's %s failed", name, what)
        return False
    log.info("the %s singleton %s here", name, "started" if what == "start" else "stopped")
    return True
