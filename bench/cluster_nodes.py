"""``bench/cluster.py --phase nodes`` and ``--phase takeover``: real ``reel node`` processes.

``nodes``: the run workload of ``bench/runs.py`` (the deterministic provider, one ``echo`` tool
call, two turns a run) sent through real node processes: one node on SQLite, one lone node on a
throwaway PostgreSQL, then 2 and 3 nodes of a cluster on it. ``--clients`` sessions each run
one run after another (a closed loop), each run sent to a random node over gRPC and followed on
its ``RunStream`` to its end (a subscription: nothing polls). Printed per setup: runs/s,
latency p50/p99 and what predicts capacity on separate machines, the CPU seconds per 1,000 runs
spent by the nodes and by PostgreSQL (every process of its cluster, from ``/proc``). On 2 cores
more nodes cannot go faster. Target: one node on PostgreSQL >= 0.5x one node on SQLite in runs
per CPU second. ``--node-counts`` picks the PostgreSQL setups (``1``: the target's alone),
``--node-rounds`` repeats them, SQLite and PostgreSQL alternating, and prints medians;
``--py-spy PATH`` prints each thread's CPU of the (first) node and leaves a raw py-spy profile
per node in the work dir (it slows the nodes: the per-run figures of pollers grow);
``--log-statements`` prints the statements per run PostgreSQL ran, by text.

``takeover``: three nodes at ``--ttl`` (2 and 5 s); ``--kills`` times, the node holding a
session's shard is killed with SIGKILL and the time until a command for that session succeeds
through a survivor is measured (then the node is started again and the cluster settles).
Target: <= TTL + a tick (TTL/4) + 1 s, the issue's bound for a test; the median is printed
against TTL + tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grpclib.client import Channel

from events.postgres.reader import COLUMNS
from tests.postgres_server import PostgresServer
from tests.transports.cluster.nodes import owners, stop_all
from tests.transports.test_node_process import ServingNode
from transports.grpc.client import RunStreamClient

TEXT = 'look it up\n/tool echo {"text": "bench"}'
TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})
SHARDS = 16


def cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def postgres_pids(server: PostgresServer) -> list[int]:
    """The postmaster and every process it started."""
    master = int((server.data / "postmaster.pid").read_text().split()[0])
    pids = [master]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == master:
                pids.append(int(entry.name))
    return pids


def start_nodes(root: Path, env: dict[str, str], names: list[str]) -> list[ServingNode]:
    nodes = []
    for name in names:
        data = root / (name or "node")
        data.mkdir(mode=0o700)
        nodes.append(ServingNode(data, {**env, "REEL_CLUSTER_NODE": name} if name else env))
    return nodes


async def one_run(node: ServingNode, session_id: str) -> float:
    started = time.perf_counter()
    channel = Channel(node.grpc_host, node.grpc_port)
    try:
        async with RunStreamClient(channel, node.token, timeout=120) as stream:
            await stream.start(TEXT, session_id=session_id)
            async for event in stream.events():
                if event.kind in TERMINAL:
                    if event.kind != "run.completed":
                        raise RuntimeError(f"a run ended {event.kind}")
                    break
    finally:
        channel.close()
    return time.perf_counter() - started


def drive(nodes: list[ServingNode], clients: int, runs: int) -> tuple[float, list[float]]:
    """``runs`` runs over ``clients`` sessions, a closed loop; wall seconds and latencies."""
    sessions = []
    for i in range(clients):
        status, body = nodes[i % len(nodes)].http("POST", "/v1/sessions", {})
        if status != 201:
            raise RuntimeError(f"cannot create a session: {body}")
        sessions.append(body["session_id"])
    latencies: list[float] = []
    left = [runs]

    async def client(session_id: str) -> None:
        while left[0] > 0:
            left[0] -= 1
            latencies.append(await one_run(random.choice(nodes), session_id))

    async def all_clients() -> None:
        await asyncio.gather(*(client(s) for s in sessions))

    started = time.perf_counter()
    asyncio.run(asyncio.wait_for(all_clients(), timeout=600))
    return time.perf_counter() - started, latencies


def spy(pids: list[int], out: Path, py_spy: str | None) -> list[subprocess.Popen[bytes]]:
    """``py-spy record`` on each of ``pids`` into ``out`` (none without ``py_spy``)."""
    if not py_spy:
        return []
    return [
        subprocess.Popen(
            [
                py_spy,
                "record",
                "--pid",
                str(pid),
                "--rate",
                "200",
                "--format",
                "raw",
                "--threads",
                "--output",
                str(out.with_suffix(f".{pid}.txt")),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds each thread of ``pid`` has used so far, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_names(py_spy: str, pid: int) -> dict[int, str]:
    """Each Python thread's name by thread id (``py-spy dump``)."""
    done = subprocess.run(
        [py_spy, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True
    )
    names = {}
    for line in done.stdout.splitlines():
        if line.startswith("Thread "):
            tid, _, rest = line[len("Thread ") :].partition(" ")
            with contextlib.suppress(ValueError):
                names[int(tid, 0)] = rest.split('"')[1] if '"' in rest else rest
    return names


def statements_logged(server: PostgresServer, on: bool) -> None:
    """Log every statement the server runs (``log_statement``), or stop."""
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET log_statement = '{'all' if on else 'none'}'")
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.5)


def count_statements(server: PostgresServer, runs: int, since: int) -> None:
    """Print the statements per run the server logged, by their first words."""
    import collections
    import re

    counts: collections.Counter[str] = collections.Counter()
    with (server.root / "log").open("rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    for line in text.splitlines():
        found = re.search(r"LOG:  (?:statement|execute [^:]*): (.*)", line)
        if found:
            text = " ".join(found.group(1).split()).replace(COLUMNS, "<columns>")
            counts[text[:150]] += 1
    total = sum(counts.values())
    print(f"  {total / runs:.1f} statements per run", flush=True)
    for text, n in counts.most_common(15):
        print(f"  {n / runs:6.2f}/run  {text}", flush=True)


def stop_spies(spies: list[subprocess.Popen[bytes]]) -> None:
    for process in spies:
        process.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    for process in spies:
        process.wait(timeout=60)


def one_setup(
    server: PostgresServer, args: Any, backend: str, count: int, work: Path
) -> dict[str, float]:
    """One setup measured: a warm-up, then ``args.runs`` runs; its figures."""
    work.mkdir(parents=True)
    env = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    if backend == "postgres":
        dsn = server.database()
        import psycopg

        from events.postgres.schema import create

        with psycopg.connect(dsn, autocommit=True) as conn:
            create(conn, SHARDS)
        env |= {"REEL_JOURNAL_BACKEND": "postgres", "REEL_JOURNAL_DSN": dsn}
        env |= {"REEL_CLUSTER_PORT": "0", "REEL_CLUSTER_READY_TICKS": "1"}
    # one node on postgres runs alone (it holds every shard, nothing to forward)
    names = [f"n{i}" for i in range(count)] if count > 1 else [""]
    nodes = start_nodes(work, env, names)
    try:
        drive(nodes, args.clients, args.clients * 2)  # warm-up, and placement settles
        time.sleep(2.0)
        pids = [n.process.pid for n in nodes]
        pg = postgres_pids(server) if backend == "postgres" else []  # its backends now
        spies = spy(pids, work / "profile", args.py_spy)
        node_cpu, pg_cpu = cpu_of(pids), cpu_of(pg)
        threads = thread_cpu(pids[0])
        since = (server.root / "log").stat().st_size
        if args.log_statements and backend == "postgres":
            statements_logged(server, True)
        wall, latencies = drive(nodes, args.clients, args.runs)
        if args.log_statements and backend == "postgres":
            statements_logged(server, False)
            count_statements(server, args.runs, since)
        node_cpu, pg_cpu = cpu_of(pids) - node_cpu, cpu_of(pg) - pg_cpu
        after = thread_cpu(pids[0])
        stop_spies(spies)
        if args.py_spy:
            named = thread_names(args.py_spy, pids[0])
            spent = sorted(((after[t] - threads.get(t, 0.0), t) for t in after), reverse=True)
            for seconds, tid in spent[:12]:
                per = seconds / args.runs * 1000
                print(f"  {per:6.2f} CPU s/1000 runs  {named.get(tid, tid)}", flush=True)
            print(f"  py-spy profiles in {work}", flush=True)
    except BaseException:
        for node in nodes:  # what the nodes said, for whoever reads the failure
            print(f"--- {node.data.name} (exit {node.process.poll()})", file=sys.stderr)
            print("\n".join(str(line) for line in node.lines[-30:]), file=sys.stderr)
        raise
    finally:
        stop_all(nodes)
    return {
        "runs_per_s": args.runs / wall,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": sorted(latencies)[int(0.99 * (len(latencies) - 1))] * 1000,
        "node_cpu_s_per_1000": node_cpu / args.runs * 1000,
        "db_cpu_s_per_1000": pg_cpu / args.runs * 1000,
    }


def phase_nodes(args: Any) -> dict[str, Any]:
    """Each setup ``--node-rounds`` times, SQLite and PostgreSQL alternating (the load drifts
    on both alike); the medians of each figure, and the ratio of the medians."""
    root = Path(args.dir)
    counts = [int(c) for c in args.node_counts.split(",")]
    setups: list[tuple[str, int]] = [("sqlite", 1)] * (not args.skip_sqlite)
    setups += [("postgres", c) for c in counts]
    rounds: dict[str, list[dict[str, float]]] = {}
    server = PostgresServer()
    try:
        for round_ in range(args.node_rounds):
            for backend, count in setups:
                label = f"{count} node{'s' if count > 1 else ''} on {backend}"
                work = root / f"{backend}-{count}-{round_}"
                r = one_setup(server, args, backend, count, work)
                rounds.setdefault(label, []).append(r)
                print(
                    f"{label:22s} {r['runs_per_s']:7.1f} runs/s  p50 {r['p50_ms']:6.1f} ms  "
                    f"p99 {r['p99_ms']:6.1f} ms  CPU s/1000 runs: nodes "
                    f"{r['node_cpu_s_per_1000']:6.1f}  postgres {r['db_cpu_s_per_1000']:6.1f}",
                    flush=True,
                )
    finally:
        server.stop()
    results: dict[str, Any] = {
        label: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for label, runs in rounds.items()
    }
    base = results.get("1 node on sqlite")
    if base is None or "1 node on postgres" not in results:
        return results
    one = results["1 node on postgres"]
    ratio = base["node_cpu_s_per_1000"] / (one["node_cpu_s_per_1000"] + one["db_cpu_s_per_1000"])
    verdict = "PASS" if ratio >= 0.5 else "MISS"
    print(
        f"one node on postgres: {ratio:.2f}x the runs per CPU second of one on sqlite "
        f"(target >= 0.5x, medians of {args.node_rounds} rounds): {verdict}"
    )
    results["ratio"] = ratio
    return results


def phase_takeover(args: Any) -> dict[str, Any]:
    import psycopg

    from events.postgres.homes import shard_of
    from events.postgres.schema import create

    root = Path(args.dir)
    server = PostgresServer()
    results: dict[str, Any] = {}
    try:
        for ttl in args.ttl:
            dsn = server.database()
            with psycopg.connect(dsn, autocommit=True) as conn:
                create(conn, SHARDS)
            env = {
                "REEL_HTTP_PORT": "0",
                "REEL_GRPC_PORT": "0",
                "REEL_JOURNAL_BACKEND": "postgres",
                "REEL_JOURNAL_DSN": dsn,
                "REEL_CLUSTER_PORT": "0",
                "REEL_CLUSTER_TTL_S": str(ttl),
                "REEL_CLUSTER_READY_TICKS": "1",
            }
            work = root / f"takeover-{ttl}"
            work.mkdir(parents=True)
            nodes = {n.data.name: n for n in start_nodes(work, env, ["a", "b", "c"])}
            times: list[float] = []
            try:
                deadline = time.monotonic() + 60
                while len(set(owners(dsn).values())) < 3 or len(owners(dsn)) < SHARDS:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the three nodes never shared the shards")
                    time.sleep(0.2)
                for kill in range(args.kills):
                    someone = next(iter(nodes.values()))
                    status, session = someone.http("POST", "/v1/sessions", {})
                    if status != 201:
                        raise RuntimeError(f"cannot create a session: {session}")
                    sid = session["session_id"]
                    owner = owners(dsn).get(shard_of(sid, SHARDS))
                    if owner is None:
                        continue
                    survivor = next(n for name, n in nodes.items() if name != owner)
                    victim = nodes[owner]
                    victim.process.kill()
                    killed = time.monotonic()
                    victim.finish()
                    while True:
                        status, body = survivor.http("POST", f"/v1/sessions/{sid}/reset", {})
                        if status == 200:
                            break
                        if time.monotonic() - killed > 60:
                            raise RuntimeError(f"no takeover after 60 s: {body}")
                        time.sleep(0.02)
                    times.append(time.monotonic() - killed)
                    data = victim.data
                    nodes[owner] = ServingNode(data, {**env, "REEL_CLUSTER_NODE": owner})
                    time.sleep(ttl)  # it is placed shards again
                    print(f"  TTL {ttl:g} s kill {kill + 1}: {times[-1]:.2f} s", flush=True)
            finally:
                stop_all(nodes.values())
            bound = ttl * 1.25
            median = statistics.median(times)
            worst = max(times)
            results[f"ttl {ttl:g}"] = {"median_s": median, "max_s": worst, "kills": len(times)}
            print(
                f"TTL {ttl:g} s: takeover median {median:.2f} s, max {worst:.2f} s over "
                f"{len(times)} kills; TTL + tick = {bound:.2f} s (median {median / bound:.2f}x): "
                f"{'PASS' if median <= bound else 'MISS'}; max within TTL + tick + 1 s: "
                f"{'PASS' if worst <= bound + 1 else 'MISS'}",
                flush=True,
            )
    finally:
        server.stop()
    return results
