"""What traces cost a run (issue 26): the same runs with telemetry off, on, and on the tree
before traces existed (``--base``), alternated round by round.

Each measurement runs in a fresh interpreter (``--phase``): a node composed as bench/runs.py
composes it (the deterministic provider, one ``echo`` tool call per run, so two turns), one
session running ``--runs`` runs one after another (bench/runs.py's closed-loop driver), after a
warm-up run. ``on`` gives the node an OTLP/HTTP tracer (transports.telemetry.otlp) exporting
to a collector in another process (a loopback aiohttp server that reads each body, counts its
spans with opentelemetry-proto and answers 200), so the exporter's encoding and sending are
this process's CPU, the collector's are not. ``off`` is the same tree with no ``[telemetry]``;
``base`` is ``off`` run from another checkout (``git worktree add``) of the tree before.

Per mode: wall time and CPU time (user + system of the whole process, the exporter's thread
included) per run, the spans the collector received, and whether the OpenTelemetry SDK was
imported. Figures are printed, never asserted; the exit status is 0 unless the bench broke.

Run: ``.venv/bin/python bench/traces.py [--runs 300] [--rounds 3] [--base ../wt-base]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's directory comes first on sys.path, and bench/http.py would shadow
# the standard library's ``http`` package: drop the directory, put the repository root instead.
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:] = [str(REPO), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

MODES = ("base", "off", "on")


def collector() -> None:
    """``--collector``: serve ``POST /v1/traces`` on a free loopback port (printed first),
    counting spans, until stdin closes; ``GET /count`` answers the count so far."""
    import asyncio
    import threading

    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    spans = 0
    answer = ExportTraceServiceResponse().SerializeToString()

    async def traces(request: web.Request) -> web.Response:
        nonlocal spans
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        spans += sum(len(scope.spans) for rs in message.resource_spans for scope in rs.scope_spans)
        return web.Response(body=answer, content_type="application/x-protobuf")

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"spans": spans})

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", traces)
        app.router.add_get("/count", count)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server)
        print(server.sockets[0].getsockname()[1], flush=True)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(done.set)), daemon=True
        ).start()
        await done.wait()
        await runner.cleanup()

    asyncio.run(serve())


def collected(port: int) -> int:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as reply:
        count: int = json.loads(reply.read())["spans"]
    return count


def phase(mode: str, runs: int, port: int, work: Path) -> dict[str, Any]:
    """One mode's runs in this interpreter (``--phase``): the result as a dict."""
    from actors import ActorsConfig
    from bench.runs import Driver, cpu_s, open_node, warm_up

    tracer: Any = None
    import_s = 0.0
    if mode == "on":
        started = time.perf_counter()
        from transports.config import TelemetryConfig
        from transports.telemetry import open_tracer

        tracer = open_tracer(
            TelemetryConfig(otlp_endpoint=f"http://127.0.0.1:{port}", export_every_s=0.5)
        )
        import_s = time.perf_counter() - started
    journal, node = open_node(work, ActorsConfig())
    if tracer is not None:
        node.services.tracer = tracer
    warm_up(journal, node)
    driver = Driver(journal, node, 1, runs, None)
    cpu_before = cpu_s()
    elapsed = driver.run()
    cpu = cpu_s() - cpu_before
    node.stop()
    journal.close()
    close_s = 0.0
    if tracer is not None:
        started = time.perf_counter()
        tracer.close()
        close_s = time.perf_counter() - started
    ends = {kind for kind, _, _ in driver.ended.values()}
    return {
        "mode": mode,
        "runs": len(driver.ended),
        "ends": sorted(ends),
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "sdk_imported": any(m.startswith("opentelemetry.sdk") for m in sys.modules),
        "tracer_open_s": import_s,
        "tracer_close_s": close_s,
    }


def child(mode: str, args: argparse.Namespace, port: int, work: Path) -> dict[str, Any]:
    repo = Path(args.base).resolve() if mode == "base" else REPO
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--phase",
        mode,
        "--runs",
        str(args.runs),
        "--port",
        str(port),
        "--dir",
        str(work),
    ]
    # The base tree's packages first; bench.runs (the driver) comes from this tree either way.
    path = os.pathsep.join([str(repo), str(REPO)])
    before = collected(port)
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": path},
        cwd=repo,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise RuntimeError(f"phase {mode} failed with exit status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["spans"] = collected(port) - before
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="runs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the modes")
    parser.add_argument("--base", help="a checkout of the tree before traces (adds 'base')")
    parser.add_argument("--collector", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.collector:
        collector()
        return
    if args.phase:
        print(json.dumps(phase(args.phase, args.runs, args.port, Path(args.dir))))
        return
    modes = [m for m in MODES if m != "base" or args.base]
    server = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--collector"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    port = int(server.stdout.readline())
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    try:
        with tempfile.TemporaryDirectory(prefix="reel-bench-traces-") as tmp:
            for round_ in range(args.rounds):
                for mode in modes if round_ % 2 == 0 else reversed(modes):
                    work = Path(tmp) / f"{mode}{round_}"
                    result = child(mode, args, port, work)
                    results[mode].append(result)
                    print(
                        f"round {round_ + 1} {mode:>4}: {result['runs']} runs "
                        f"{result['elapsed_s'] / result['runs'] * 1000:.2f} ms/run wall, "
                        f"{result['cpu_s'] / result['runs'] * 1000:.2f} ms/run CPU, "
                        f"{result['spans']} spans, ends {result['ends']}",
                        flush=True,
                    )
    finally:
        server.stdin.close()
        server.wait(30)
    print(f"\n{args.runs} runs per measurement, {args.rounds} rounds, medians:")
    reference = statistics.median(r["cpu_s"] / r["runs"] for r in results[modes[0]])
    for mode in modes:
        rows = results[mode]
        wall = statistics.median(r["elapsed_s"] / r["runs"] * 1000 for r in rows)
        cpu = statistics.median(r["cpu_s"] / r["runs"] * 1000 for r in rows)
        spans = statistics.median(r["spans"] / r["runs"] for r in rows)
        extra = ""
        if mode == "on":
            extra = (
                f", tracer opened in {statistics.median(r['tracer_open_s'] for r in rows):.3f} s"
                f" (SDK import included), closed in "
                f"{statistics.median(r['tracer_close_s'] for r in rows):.3f} s"
            )
        print(
            f"  {mode:>4}: {wall:.2f} ms/run wall, {cpu:.2f} ms/run CPU "
            f"({cpu / (reference * 1000):.3f}x {modes[0]}), {spans:.1f} spans/run, "
            f"SDK imported: {sorted({r['sdk_imported'] for r in rows})}{extra}"
        )


if __name__ == "__main__":
    main()
