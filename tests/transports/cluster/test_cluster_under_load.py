"""Issue 24's end-to-end test: three ``reel node`` processes on one PostgreSQL (``fsync=on``),
each with a witness file outside its data dir; client threads send runs to random nodes over
HTTP (every third one asks a human first), recording each acknowledged ``StartRun`` (202 and a
``run_id``); one node that owns shards with live sessions is killed with ``kill -9`` under
load (a run acknowledged by one node is found at once on another, over HTTP and gRPC). Then,
through the survivors:

* every acknowledged run ends (the approvals left pending are decided through a survivor);
* every acknowledged run's ``run.accepted`` is in the journal;
* the dead node's session accepts a command on a survivor within TTL + tick + 1 s (+ slack);
* after the survivors stop cleanly, every shard chain, the checkpoint chain and all three
  witnesses verify against the roster of the three nodes' keys; ``reel replay`` on each
  survivor matches its views; and the survivors' views are identical table by table, but for
  ``projection_checkpoints`` (the position each node folded to: the node stopped last appended
  its final super-checkpoint after the first had stopped).

And the same cluster under load across a PostgreSQL crash (``pg_ctl stop -m immediate``) and
start, the database away past the TTL.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
import urllib.error
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from events.postgres.homes import shard_of
from events.postgres.placement import place
from projections.replay import compare
from proto.reel.v1 import GatewayStub, GetRunRequest
from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import (
    ASKING,
    SHARDS,
    TTL_S,
    cluster_env,
    metric_lines,
    owners,
    stop_all,
    until,
)
from tests.transports.node.test_daemon import reel
from tests.transports.test_node_process import ServingNode
from transports.grpc.client import auth_metadata

CLIENTS = 4
OUTAGE_S = 3.0
"""How long PostgreSQL stays away: past the TTL, so every lease lapses and is taken anew."""
ENDED = ("done", "failed", "cancelled")
WAIT_S = 45.0
"""How long a run may take to end or to ask, on a loaded 2-core machine."""

KNOWN_GAP = "could not enqueue the reflection of runs"
"""Every node's learning desk enqueues each run's reflection task (the task queue is not
cluster-aware yet): two nodes enqueueing one into two shards at once collide on its idempotency
key inside ``shard_append``, a warning on the loser."""


@dataclass
class Load:
    """What the clients saw: each acknowledged run, each refusal, and which nodes are dead."""

    acknowledged: dict[str, str] = field(default_factory=dict)
    """run_id -> session_id of every 202."""
    refused: list[tuple[str, int, Any]] = field(default_factory=list)
    dead: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def call(node: ServingNode, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request; a node that does not answer (dead, or the socket timed out) is status 0."""
    try:
        return node.http(method, path, body)
    except (OSError, urllib.error.URLError) as exc:
        return 0, repr(exc)


def alive(nodes: dict[str, ServingNode], load: Load) -> list[ServingNode]:
    with load.lock:
        return [n for name, n in nodes.items() if name not in load.dead]


def settle(nodes: dict[str, ServingNode], load: Load, run_id: str) -> str:
    """Wait until ``run_id`` ends, deciding its approval (allow) through a random live node
    when it asks; its final state."""
    deadline = time.monotonic() + WAIT_S
    seen: Any = None
    while time.monotonic() < deadline:
        node = random.choice(alive(nodes, load))
        status, run = call(node, "GET", f"/v1/runs/{run_id}")
        seen = (node.data.name, status, run)
        if status == 200 and run["state"] in ENDED:
            return str(run["state"])
        status, page = call(node, "GET", "/v1/approvals?state=pending")
        if status == 200:
            for approval in page["items"]:
                if approval["run_id"] == run_id:
                    call(
                        node,
                        "POST",
                        f"/v1/approvals/{approval['approval_id']}",
                        {"decision": "allow"},
                    )
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} neither ended nor could be approved in {WAIT_S} s: {seen}")


def client(nodes: dict[str, ServingNode], load: Load, session_id: str, seed: int) -> None:
    """Send runs to random live nodes for ``session_id`` until told to stop, each one settled
    before the next (so a pending approval is decided by this client, through any node)."""
    rng = random.Random(seed)
    try:
        count = 0
        while not load.stop.is_set():
            count += 1
            text = ASKING if count % 3 == 0 else f"hello {count}"
            node = rng.choice(alive(nodes, load))
            status, body = call(node, "POST", f"/v1/sessions/{session_id}/messages", {"text": text})
            if status != 202:
                with load.lock:
                    load.refused.append((node.data.name, status, body))
                time.sleep(0.1)
                continue
            with load.lock:
                load.acknowledged[str(body["run_id"])] = session_id
            settle(nodes, load, str(body["run_id"]))
    except BaseException as exc:
        load.errors.append(exc)


async def grpc_run_found(node: ServingNode, run_id: str) -> bool:
    """Whether ``Gateway.GetRun`` on ``node`` knows the run (False: NOT_FOUND)."""
    channel = Channel(node.grpc_host, node.grpc_port)
    try:
        stub = GatewayStub(channel, metadata=auth_metadata(node.token))
        try:
            await stub.get_run(GetRunRequest(run_id=run_id), timeout=10)
        except GRPCError as exc:
            assert exc.status == Status.NOT_FOUND, exc
            return False
        return True
    finally:
        channel.close()


def quiet(dsn: str, nodes: list[ServingNode]) -> None:
    """Wait until nothing but super-checkpoints is appended for a while (the runs' reflection
    tasks enqueued and run) and every node's views include it all: nodes stopped then have
    folded the same rows (each stops at its own position, the last one's final
    super-checkpoints after the others')."""

    def data_head() -> int:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SELECT max(position) FROM events WHERE shard >= 0").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def folded(node: ServingNode, head: int) -> bool:
        metrics = metric_lines(node)
        return (
            int(metrics["reel_events_appended_total"]) >= head
            and int(metrics["reel_projection_lag_events"]) == 0
        )

    def settled() -> bool:
        head = data_head()
        time.sleep(1.5)
        return head == data_head() and all(folded(node, head) for node in nodes)

    until(settled, "the journal to go quiet and every node to fold it", WAIT_S)


def accepted_runs(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT correlation_id FROM events WHERE kind = 'run.accepted'"
        ).fetchall()
    return {str(r) for (r,) in rows}


def start_cluster(
    dsn: str, tmp_path: Path, nodes: dict[str, ServingNode]
) -> tuple[dict[str, Path], dict[str, dict[str, str]]]:
    """Three nodes into ``nodes`` (the caller stops them), each with a witness outside its data
    dir, once every shard is on the node placement puts it on (a join hands shards over one a
    tick: a command meeting a hand-over may be refused with a 503 once the router's patience is
    spent, which the tests' first requests do not expect); their witnesses and environments."""
    init = reel("journal", "init", "--shards", str(SHARDS), env={"REEL_JOURNAL_DSN": dsn})
    assert init.returncode == 0, init.stderr
    witnesses: dict[str, Path] = {}
    envs: dict[str, dict[str, str]] = {}
    for name in ("n1", "n2", "n3"):
        data = tmp_path / name
        data.mkdir(mode=0o700)
        witnesses[name] = tmp_path / f"{name}.witness"
        envs[name] = {**cluster_env(dsn, name), "REEL_JOURNAL_WITNESS": str(witnesses[name])}
        nodes[name] = ServingNode(data, envs[name])
    until(
        lambda: owners(dsn) == place(SHARDS, list(nodes)),
        "every shard owned by the node placement puts it on",
    )
    return witnesses, envs


def verify_all(dsn: str, tmp_path: Path, witnesses: dict[str, Path]) -> list[str]:
    """Every shard chain, the checkpoint chain and every witness verify against the roster of
    the nodes' keys (``reel journal verify``); the pinning options, for ``reel replay``."""
    roster = tmp_path / "roster.pem"
    roster.write_text(
        "".join(reel("journal", "pubkey", "--data", str(tmp_path / n)).stdout for n in witnesses)
    )
    pinned = ["--roster", str(roster)]
    for path in witnesses.values():
        pinned += ["--witness", str(path)]
    verify = reel("journal", "verify", "--dsn", dsn, *pinned, env={"REEL_JOURNAL_DSN": dsn})
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "every shard chain intact, anchored by pinned roster + witness" in verify.stdout
    return pinned


def faults(node: ServingNode) -> list[str]:
    """The node's log lines at level error or with a traceback (but the known gap's)."""
    return [
        line
        for line in node.lines
        if ('"exc":' in line or '"error"' in line) and KNOWN_GAP not in line
    ]


def dump(nodes: dict[str, ServingNode]) -> None:
    for name, node in nodes.items():
        print(f"--- {name}")
        print("\n".join(str(line) for line in node.lines[-40:]))


def test_a_node_killed_under_load_loses_nothing_acknowledged(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.database()
    nodes: dict[str, ServingNode] = {}
    load = Load()
    threads: list[threading.Thread] = []
    try:
        witnesses, envs = start_cluster(dsn, tmp_path, nodes)

        # Sessions made through random nodes, one per client, and one per node left waiting
        # for a human over the kill (decided through a survivor after it).
        def new_session() -> str:
            status, session = random.choice(list(nodes.values())).http("POST", "/v1/sessions", {})
            assert status == 201, session
            return str(session["session_id"])

        sessions = [new_session() for _ in range(CLIENTS)]
        waiting: dict[str, str] = {}  # run_id -> session_id
        for i in range(6):
            session_id = new_session()
            asked, elsewhere = random.sample(list(nodes.values()), 2)
            status, body = asked.http(
                "POST", f"/v1/sessions/{session_id}/messages", {"text": ASKING}
            )
            assert status == 202, body
            waiting[str(body["run_id"])] = session_id
            # A run acknowledged by one node is found over gRPC on another at once.
            assert asyncio.run(grpc_run_found(elsewhere, str(body["run_id"]))), i
        load.acknowledged.update(waiting)
        threads = [
            threading.Thread(target=client, args=(nodes, load, s, i), daemon=True)
            for i, s in enumerate(sessions)
        ]
        for thread in threads:
            thread.start()
        until(lambda: len(load.acknowledged) >= len(waiting) + 12, "runs under load", WAIT_S)

        # The victim: the node holding the most runs waiting for a human (then the most
        # sessions); the probe, one of its sessions.
        held = owners(dsn)
        home = {s: held.get(shard_of(s, SHARDS)) for s in [*sessions, *waiting.values()]}
        waits = [home[s] for s in waiting.values()]
        victim = max(nodes, key=lambda n: (waits.count(n), list(home.values()).count(n)))
        assert victim in waits
        probe = next(s for s, at in home.items() if at == victim)
        survivors = [n for n in nodes if n != victim]
        with load.lock:
            load.dead.add(victim)
        nodes[victim].process.kill()
        killed = time.monotonic()
        nodes[victim].finish()

        # The dead node's session accepts a command on a survivor.
        while True:
            status, body = call(
                nodes[survivors[0]], "POST", f"/v1/sessions/{probe}/messages", {"text": "back?"}
            )
            if status == 202:
                break
            assert status == 503, body
            assert time.monotonic() - killed < WAIT_S, body
            time.sleep(0.1)
        took = time.monotonic() - killed
        with load.lock:
            load.acknowledged[str(body["run_id"])] = probe
        # TTL + a tick + 1 s (issue 24), plus 3 s for a machine loaded by the clients and the
        # other sessions' tests (2 cores shared).
        assert took < TTL_S * 1.25 + 1.0 + 3.0, took
        assert owners(dsn).get(shard_of(probe, SHARDS)) in survivors

        # Load goes on over the survivors for a while, then stops.
        more = len(load.acknowledged) + 8
        until(lambda: len(load.acknowledged) >= more, "runs on the survivors", WAIT_S)
        load.stop.set()
        for thread in threads:
            thread.join(WAIT_S + 10)
        assert not load.errors, load.errors
        # Every refusal is a clear 503 (a move in progress) or a node that did not answer.
        assert {status for _, status, _ in load.refused} <= {0, 503}, load.refused

        # Every acknowledged run ends (those waiting for a human are decided via a survivor).
        states = {run_id: settle(nodes, load, run_id) for run_id in list(load.acknowledged)}
        assert set(states.values()) <= {"done", "failed"}, states
        assert all(states[r] == "done" for r in waiting), {r: states[r] for r in waiting}
        assert set(load.acknowledged) <= accepted_runs(dsn)

        quiet(dsn, [nodes[name] for name in survivors])
        for name in survivors:
            nodes[name].process.send_signal(signal.SIGINT)
        for name in survivors:
            assert nodes[name].finish() == 0, nodes[name].lines[-20:]
            # no error, no traceback: a dead peer is warnings at most
            assert not faults(nodes[name]), "\n".join(faults(nodes[name]))
        interrupted = sum(1 for s in states.values() if s == "failed")
        print(
            f"{len(states)} runs acknowledged, {interrupted} interrupted by the kill, "
            f"{len(load.refused)} refused; {victim}'s session answered again after {took:.2f} s"
        )
    except BaseException:
        load.stop.set()
        dump(nodes)
        raise
    finally:
        stop_all(nodes.values())

    pinned = verify_all(dsn, tmp_path, witnesses)
    for name in survivors:
        replayed = reel("replay", "--data", str(tmp_path / name), *pinned, env=envs[name])
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert "views identical to a replay from position 0" in replayed.stdout, replayed.stdout
    first, second = (tmp_path / name / "views.db" for name in survivors)
    differences = [d for d in compare(first, second) if d.table != "projection_checkpoints"]
    assert not differences, differences


def test_a_postgres_crash_under_load_loses_nothing_the_cluster_acknowledged(
    tmp_path: Path,
) -> None:
    """PostgreSQL stopped as by a power cut (``pg_ctl stop -m immediate``) while clients send
    runs to three nodes, and started again :data:`OUTAGE_S` later (every lease lapsed, and is
    taken anew): every node lives on; what it refused meanwhile was a 503, and a read that
    found nothing a 404; every acknowledged run is in the journal and ends; the nodes serve
    again without a restart, log no error and stop cleanly; every chain and witness verifies."""
    server = PostgresServer()  # its own: this test crashes it
    nodes: dict[str, ServingNode] = {}
    load = Load()
    threads: list[threading.Thread] = []
    try:
        dsn = server.database()
        witnesses, _ = start_cluster(dsn, tmp_path, nodes)
        sessions = []
        for node in nodes.values():
            status, session = node.http("POST", "/v1/sessions", {})
            assert status == 201, session
            sessions.append(str(session["session_id"]))
        threads = [
            threading.Thread(target=client, args=(nodes, load, s, i), daemon=True)
            for i, s in enumerate(sessions)
        ]
        for thread in threads:
            thread.start()
        until(lambda: len(load.acknowledged) >= 12, "runs under load", WAIT_S)
        server.crash()
        # Reads answer from the views meanwhile, a miss too (over HTTP and gRPC): asked
        # alongside, as a miss waits up to 2 s for a database that does not answer.
        unknown = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
        misses: list[tuple[int, bool]] = []
        readers = [
            threading.Thread(
                target=lambda n=node: misses.append(
                    (
                        call(n, "GET", f"/v1/runs/{unknown}")[0],
                        asyncio.run(grpc_run_found(n, unknown)),
                    )
                ),
                daemon=True,
            )
            for node in nodes.values()
        ]
        for reader in readers:
            reader.start()
        time.sleep(OUTAGE_S)  # the outage: clients keep sending
        server.start()
        for reader in readers:
            reader.join(WAIT_S)
        assert misses == [(404, False)] * len(nodes), misses
        before = len(load.acknowledged)
        until(lambda: len(load.acknowledged) >= before + 12, "runs after the restart", WAIT_S)
        load.stop.set()
        for thread in threads:
            thread.join(WAIT_S + 10)
        assert not load.errors, load.errors
        assert not [r for r in load.refused if r[1] != 503], [
            r for r in load.refused if r[1] != 503
        ]
        states = {run_id: settle(nodes, load, run_id) for run_id in list(load.acknowledged)}
        assert set(states.values()) <= {"done", "failed"}, states
        assert set(load.acknowledged) <= accepted_runs(dsn)
        quiet(dsn, list(nodes.values()))
        for node in nodes.values():
            assert node.process.poll() is None, node.lines[-20:]
            node.process.send_signal(signal.SIGINT)
        for node in nodes.values():
            assert node.finish() == 0, node.lines[-20:]
            assert not faults(node), "\n".join(faults(node))
        verify_all(dsn, tmp_path, witnesses)
        print(f"{len(states)} runs acknowledged, {len(load.refused)} refused in the outage")
    except BaseException:
        load.stop.set()
        dump(nodes)
        raise
    finally:
        stop_all(nodes.values())
        server.stop()
