"""The HTTP API against a bare aiohttp handler, and the projections' replay speed, in one run.

1. ``load``: a journal of ``--events`` events (default 100,000) in the shape the actors write:
   sessions of 20 runs; each run a ``run.accepted`` in its session's stream, then in its own
   stream ``run.started``, two ``run.turn_completed``, four ``run.output`` and a
   ``run.completed``, and three tool invocations (``tool.proposed`` / ``tool.decided`` /
   ``tool.completed``) in their own streams, all correlated to the run (18 tape entries a run).
   Written with :meth:`events.Journal.submit` (real hashing, redaction, group commit).
2. ``replay``: :func:`projections.rebuild` of every projection from position 0 into a fresh
   views.db, timed: events/s (target >= 50,000).
3. ``http``: the node is opened over that data dir (``open_runtime``) and the API started on
   its I/O loop (``start_http``). The load generator is ``wrk`` (Debian's package) in its own
   process on loopback, ``--connections`` connections for ``--seconds`` per case, or, when wrk
   is absent, a pool of aiohttp clients in a child process. Cases: ``GET /v1/runs/{id}`` and
   ``GET /v1/runs/{id}/tape`` (one run's 18 entries, ~9 KiB). The ceiling is a bare aiohttp
   handler on the same loop, same runner options, returning the very bytes the API returned
   for the same URL (no auth, no query, no encoding): the ratio is API / ceiling (target
   >= 0.5).

Targets are printed as PASS/MISS, never asserted; the exit status is 0 unless the bench broke.

Run: ``.venv/bin/python bench/http_reads.py [--events N] [--seconds S] [--dir DIR]``
(about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import Future
from pathlib import Path

from aiohttp import web

from events import (
    AppendResult,
    Event,
    Journal,
    JournalReader,
    NodeKey,
    new_id,
)
from events.catalog import (
    RunAccepted,
    RunCompleted,
    RunOutput,
    RunStarted,
    RunTurnCompleted,
    SessionCreated,
    ToolCompleted,
    ToolDecided,
    ToolProposed,
)
from projections import rebuild
from transports.config import HttpConfig, NodeConfig
from transports.http import start_http
from transports.runtime import open_runtime

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

RUNS_PER_SESSION = 20
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "the",
    "node",
    "keeps",
    "its",
    "journal",
]


def run_events(session_id: str, run_id: str, n: int) -> list[tuple[str, list[Event]]]:
    """One run as (stream, events) appends, in the order the actors write them."""
    text = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(12))
    out: list[tuple[str, list[Event]]] = [
        (f"session/{session_id}", [RunAccepted(run_id=run_id, session_id=session_id, text=text)])
    ]
    run_stream = f"run/{run_id}"
    out.append(
        (
            run_stream,
            [
                RunStarted(run_id=run_id, max_turns=16, max_tool_calls=8, wall_clock_s=900.0),
                RunTurnCompleted(
                    run_id=run_id,
                    turn=1,
                    prompt_tokens=40,
                    completion_tokens=9,
                    tool_calls=3,
                    finish_reason="tool_calls",
                    calls=tuple(
                        {"id": f"call_{i}", "name": "echo", "arguments": '{"text":"hi"}'}
                        for i in range(3)
                    ),
                ),
            ],
        )
    )
    for i in range(3):
        invocation = new_id()
        out.append(
            (
                f"tool/{invocation}",
                [
                    ToolProposed(
                        invocation_id=invocation,
                        run_id=run_id,
                        session_id=session_id,
                        call_id=f"call_{i}",
                        tool="echo",
                        arguments={"text": f"hi {i}"},
                    ),
                    ToolDecided(
                        invocation_id=invocation,
                        run_id=run_id,
                        tool="echo",
                        outcome="allow",
                        reason="allowed by baseline.tool.low_risk",
                        policy_ids=("baseline.tool.low_risk",),
                        posture="always_allow",
                    ),
                    ToolCompleted(
                        invocation_id=invocation,
                        run_id=run_id,
                        tool="echo",
                        ok=True,
                        output=f"hi {i}",
                        duration_ms=1,
                    ),
                ],
            )
        )
    out.append(
        (
            run_stream,
            [
                *(RunOutput(run_id=run_id, turn=2, text=f"{text} part {k} ") for k in range(4)),
                RunTurnCompleted(
                    run_id=run_id,
                    turn=2,
                    prompt_tokens=80,
                    completion_tokens=48,
                    tool_calls=0,
                    finish_reason="stop",
                ),
                RunCompleted(
                    run_id=run_id,
                    answer=text,
                    turns=2,
                    tool_calls=3,
                    prompt_tokens=120,
                    completion_tokens=57,
                ),
            ],
        )
    )
    return out


def load(data: Path, events: int) -> tuple[int, float, str]:
    """Write about ``events`` events; returns (events written, seconds, a run id)."""
    journal = Journal(
        data / "journal.db",
        node_key=NodeKey.load_or_create(data / "node.key"),
        synchronous="NORMAL",
    )
    started = time.perf_counter()
    futures: list[Future[AppendResult]] = []
    written = 0
    sample_run = ""
    session_id = ""
    n = 0
    try:
        while written < events:
            if n % RUNS_PER_SESSION == 0:
                session_id = new_id()
                futures.append(
                    journal.submit(
                        f"session/{session_id}",
                        [SessionCreated(session_id=session_id, label=f"bench {n}")],
                        expected_seq=None,
                        principal="bench",
                    )
                )
                written += 1
            run_id = new_id()
            for stream, batch in run_events(session_id, run_id, n):
                futures.append(
                    journal.submit(
                        stream,
                        batch,
                        expected_seq=None,
                        principal="bench",
                        correlation_id=run_id,
                    )
                )
                written += len(batch)
            if n == 0 or n % 1000 == 500:
                sample_run = run_id
            n += 1
            if len(futures) > 5000:
                for future in futures:
                    future.result()
                futures.clear()
        for future in futures:
            future.result()
    finally:
        journal.close()
    return written, time.perf_counter() - started, sample_run


# --- load generation -------------------------------------------------------------------------


def wrk(url: str, headers: dict[str, str], seconds: float, connections: int) -> float:
    """Requests/s that wrk measured (non-2xx responses make the figure invalid: checked)."""
    args = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    for name, value in headers.items():
        args += ["-H", f"{name}: {value}"]
    done = subprocess.run([*args, url], capture_output=True, text=True, check=True)
    if "Non-2xx" in done.stdout or "Socket errors" in done.stdout:
        raise RuntimeError(f"wrk saw errors:\n{done.stdout}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", done.stdout)
    if match is None:
        raise RuntimeError(done.stdout)
    return float(match.group(1))


CLIENT = r"""
import asyncio, sys, time, json
import aiohttp
url, headers = sys.argv[1], json.loads(sys.argv[2])
seconds, connections = float(sys.argv[3]), int(sys.argv[4])
async def main():
    count = 0
    bad = 0
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(headers=headers, connector=connector) as s:
        async def worker():
            nonlocal count, bad
            while time.perf_counter() < deadline:
                async with s.get(url) as r:
                    await r.read()
                    count += 1
                    bad += r.status != 200
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(connections)))
        print(json.dumps({"rps": count / (time.perf_counter() - start), "bad": bad}))
asyncio.run(main())
"""


def client_pool(url: str, headers: dict[str, str], seconds: float, connections: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, url, json.dumps(headers), str(seconds), str(connections)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout)
    if result["bad"]:
        raise RuntimeError(f"{result['bad']} non-200 responses")
    return float(result["rps"])


# --- the ceiling -----------------------------------------------------------------------------


async def bare_server(bodies: dict[str, bytes]) -> tuple[web.AppRunner, int]:
    """A bare aiohttp app serving fixed bytes per path, with the API's runner options."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.path], content_type="application/json")

    app = web.Application()
    for path in bodies:
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, int(runner.addresses[0][1])


def fetch(url: str, token: str) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body: bytes = response.read()
        return body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--dir", type=Path, default=None, help="work dir (default: a temp dir)")
    parser.add_argument("--client", choices=("auto", "wrk", "aiohttp"), default="auto")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="reel-bench-http-", dir=args.dir))
    data = work / "data"
    data.mkdir(mode=0o700)
    use_wrk = args.client == "wrk" or (args.client == "auto" and shutil.which("wrk"))
    generator = wrk if use_wrk else client_pool
    print(
        f"machine   {platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()},"
        f" load average {os.getloadavg()[0]:.1f}; load generator: "
        f"{'wrk -t1' if use_wrk else 'aiohttp client pool (child process)'},"
        f" {args.connections} connections, {args.seconds:g} s per case"
    )
    try:
        written, load_s, run_id = load(data, args.events)
        print(
            f"load      {written:,} events written in {load_s:.1f} s ({written / load_s:,.0f} ev/s)"
        )

        reader = JournalReader(data / "journal.db")
        try:
            started = time.perf_counter()
            replayed = rebuild(reader, data / "views.db")
            replay_s = time.perf_counter() - started
        finally:
            reader.close()
        replay_rate = replayed / replay_s
        print(
            f"replay    {replayed:,} events, all projections, into a fresh views.db:"
            f" {replay_s:.2f} s = {replay_rate:,.0f} events/s"
        )

        runtime = open_runtime(data, config=NodeConfig(http=HttpConfig(port=0)))
        server = start_http(runtime)
        token = (data / "admin.token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        paths = {"run": f"/v1/runs/{run_id}", "tape": f"/v1/runs/{run_id}/tape"}
        bodies = {path: fetch(server.url + path, token) for path in paths.values()}
        entries = len(json.loads(bodies[paths["tape"]])["items"])
        runner, bare_port = runtime.node.io.submit(bare_server(bodies)).result(30)
        results = []
        try:
            for name, path in paths.items():
                generator(f"{server.url}{path}", auth, 1.0, args.connections)  # warm up
                api = generator(f"{server.url}{path}", auth, args.seconds, args.connections)
                ceiling = generator(
                    f"http://127.0.0.1:{bare_port}{path}", {}, args.seconds, args.connections
                )
                size = len(bodies[path])
                detail = f"{entries} entries, " if name == "tape" else ""
                print(
                    f"GET {name:<5} ({detail}{size:,} B)  API {api:>8,.0f} req/s   ceiling"
                    f" {ceiling:>8,.0f} req/s   ratio {api / ceiling:.2f}"
                )
                results.append((name, api / ceiling))
        finally:
            runtime.node.io.submit(runner.cleanup()).result(30)
            server.close()
            runtime.close(5.0)
        for name, ratio in results:
            verdict = "PASS" if ratio >= 0.5 else "MISS"
            print(f"{verdict}      GET {name} >= 50% of the bare aiohttp ceiling: {ratio:.2f}")
        verdict = "PASS" if replay_rate >= 50_000 else "MISS"
        print(f"{verdict}      projection replay >= 50,000 events/s: {replay_rate:,.0f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
