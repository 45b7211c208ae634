"""Issue 24's "a node under ``faketime`` +5 s": a real ``reel node`` of a cluster, its wall clock
5 s ahead under libfaketime (tests/faketime.py), reclaims a dead node's lapsed task claim no
earlier than the claim's lease ends on the database's clock.

test_task_clock.py checks the same with a node reduced to its leases and task queue, with a
control (the same node on its own clock reclaims early); this one starts the node people run,
every thread, library and listener of it under the moved clock. The node must be up and
holding the shards well before the claim would lapse on its clock (``lease_until - 5 s``),
or a node on its own clock could not have reclaimed early either: that is asserted first."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from events.postgres.database import initialise
from tests.actors.tasks.test_task_clock import FAKETIME_S, database_ms, dead_claim, task_rows
from tests.faketime import shifted
from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import SHARDS, cluster_env, owners, until
from tests.transports.test_node_process import ServingNode

LEASE_MS = 20_000
"""The dead node's claim: a node's start (seconds on a busy machine) and FAKETIME_S fit in it,
with room to spare."""
MARGIN_MS = 2_000
"""How long before ``lease_until - FAKETIME_S`` the node must hold every shard."""


def test_a_reel_node_under_faketime_5s_ahead_reclaims_no_claim_early(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    initialise(dsn, SHARDS)
    task_id, lease_until_ms = dead_claim(dsn, LEASE_MS)
    data = tmp_path / "b"
    data.mkdir(mode=0o700)
    env = {**shifted(FAKETIME_S), **cluster_env(dsn, "b")}
    node = ServingNode(data, env)
    try:
        ready_ms = int(datetime.fromisoformat(node.ready["ts"]).timestamp() * 1000)
        ahead_ms = ready_ms - database_ms(dsn)  # the ready line's stamp is its wall clock's
        assert ahead_ms >= (FAKETIME_S - 1) * 1000, f"the preload did not take: {ahead_ms} ms"
        until(lambda: set(owners(dsn).values()) == {"b"} and len(owners(dsn)) == SHARDS, "b")
        held_ms = database_ms(dsn)
        assert held_ms < lease_until_ms - FAKETIME_S * 1000 - MARGIN_MS, (
            f"the node took too long to tell: it held every shard at {held_ms}, "
            f"the claim lapses on its clock at {lease_until_ms - FAKETIME_S * 1000}"
        )

        def running() -> None:
            assert node.process.poll() is None, node.lines[-40:]

        rows = task_rows(dsn, task_id, running)
    finally:
        node.close()
    claims = [r for r in rows if r.kind == "task.claimed"]
    assert len(claims) == 2, [r.kind for r in rows]
    assert claims[1].recorded_at_ms >= lease_until_ms, (
        f"reclaimed {lease_until_ms - claims[1].recorded_at_ms} ms before the lease ended"
    )
    assert [r.kind for r in rows].count("task.succeeded") == 1
