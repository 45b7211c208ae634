"""Channels: messages/s routed through ``RouteMessage`` next to bare HTTP POSTs, one node, one run.

In one invocation, one process:

- A node (``open_runtime`` on a temp data dir, deterministic provider) with its HTTP and gRPC
  servers on the node's I/O loop, and one webhook channel ``bench`` (direct messages allowed,
  flood control out of the way, no ``outbound_url``: what is measured is routing up to the run
  being accepted, not the replies).
- ``http``: ``--clients`` concurrent clients POST ``/v1/sessions/{id}/messages`` (each its own
  session, keep-alive connections) for ``--seconds``: a run accepted per request, the node's
  plainest way in. This is the ceiling.
- ``route``: the same number of clients call gRPC ``reel.v1.Gateway/RouteMessage`` (each its
  own direct conversation, a fresh message id per call) for the same time: per call the router
  decides, ``channel.message_routed`` and ``channel.run_requested`` are appended in one commit
  (idempotency key), the session is found by its key, ``run.accepted`` is appended, and
  ``channel.run_started`` is submitted (not waited for); the answer carries the run id.
- The two alternate (``--rounds`` times each, waiting for the node's runs to finish in
  between) so both see the same load of runs finishing in the background; the best round of
  each is compared.

Target: route >= 50% of http. Printed as PASS/MISS, never asserted. Run:
``.venv/bin/python bench/channels.py`` (about 40 s).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
from pathlib import Path

import aiohttp
from grpclib.client import Channel

from actors.channels.config import ChannelConfig
from proto.reel.v1 import GatewayStub, RouteMessageRequest
from transports.config import HttpConfig, NodeConfig
from transports.grpc import start_grpc
from transports.grpc.client import auth_metadata
from transports.http import start_http
from transports.runtime import Runtime, open_runtime

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SECRET_ENV = "REEL_BENCH_CHANNEL_SECRET"
_ids = itertools.count()


async def http_clients(url: str, token: str, sessions: list[str], seconds: float) -> int:
    """Runs accepted over ``POST /v1/sessions/{id}/messages`` by len(sessions) clients."""
    headers = {"Authorization": f"Bearer {token}"}
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=len(sessions))
    async with aiohttp.ClientSession(url, headers=headers, connector=connector) as http:

        async def client(session_id: str) -> int:
            done = 0
            while time.perf_counter() < deadline:
                async with http.post(
                    f"/v1/sessions/{session_id}/messages", json={"text": "hello"}
                ) as reply:
                    await reply.read()
                    if reply.status != 202:
                        raise RuntimeError(f"HTTP {reply.status}")
                done += 1
            return done

        return sum(await asyncio.gather(*(client(s) for s in sessions)))


async def route_clients(port: int, token: str, clients: int, seconds: float) -> int:
    """Runs accepted over gRPC ``RouteMessage`` by ``clients`` clients (10 per connection)."""
    channels = [Channel("127.0.0.1", port) for _ in range((clients + 9) // 10)]
    deadline = time.perf_counter() + seconds

    async def client(n: int) -> int:
        stub = GatewayStub(channels[n // 10], metadata=auth_metadata(token), timeout=30)
        done = 0
        while time.perf_counter() < deadline:
            answer = await stub.route_message(
                RouteMessageRequest(
                    channel="bench",
                    conversation=f"dm-{n}",
                    sender=f"user{n}",
                    text="hello",
                    message_id=f"bench-{next(_ids)}",
                    is_direct=True,
                )
            )
            if not answer.accepted:
                raise RuntimeError(f"refused: {answer.reason} {answer.detail}")
            done += 1
        return done

    try:
        return sum(await asyncio.gather(*(client(n) for n in range(clients))))
    finally:
        for channel in channels:
            channel.close()


def settle(runtime: Runtime, timeout: float = 60.0) -> None:
    """Wait until no run is live and the views have caught up."""
    deadline = time.monotonic() + timeout
    registry = runtime.node.services.registry
    while registry.live_run_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    runtime.projector.wait_for(runtime.journal.committed_position, 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    os.environ[SECRET_ENV] = "bench-channel-secret-0123456789"
    bench = ChannelConfig(
        kind="webhook",
        secret_env=SECRET_ENV,
        dm_policy="allow",
        rate_limit_per_minute=1_000_000,
        rate_burst=1_000_000,
    )
    data = Path(tempfile.mkdtemp(prefix="reel-bench-channels-"))
    config = NodeConfig(http=HttpConfig(port=0), channels={"bench": bench})
    runtime = open_runtime(data, config=config)
    http = start_http(runtime)
    grpc = start_grpc(runtime, port=0)
    token = (data / "admin.token").read_text().strip()
    try:
        sessions = asyncio.run(_sessions(http.url, token, args.clients))
        print(
            f"{args.clients} clients, {args.seconds:.0f} s per round, {args.rounds} rounds each, "
            f"synchronous={config.journal.synchronous}"
        )
        best = {"http": 0.0, "route": 0.0}
        for round_ in range(1, args.rounds + 1):
            for name in ("http", "route"):
                settle(runtime)
                started = time.perf_counter()
                if name == "http":
                    count = asyncio.run(http_clients(http.url, token, sessions, args.seconds))
                else:
                    count = asyncio.run(route_clients(grpc.port, token, args.clients, args.seconds))
                rate = count / (time.perf_counter() - started)
                best[name] = max(best[name], rate)
                what = (
                    "POST /v1/sessions/{id}/messages"
                    if name == "http"
                    else "gRPC RouteMessage (router + routed event + run)"
                )
                print(f"round {round_}  {name:6s} {rate:8,.0f} runs accepted/s   {what}")
        ratio = best["route"] / best["http"]
        verdict = "PASS" if ratio >= 0.5 else "MISS"
        print(
            f"{verdict}     route / http = {ratio:.2f} (target 0.50): best rounds "
            f"{best['route']:,.0f} vs {best['http']:,.0f} runs accepted/s"
        )
    finally:
        settle(runtime)
        grpc.close()
        http.close()
        runtime.close(grace_s=0)
    return 0


async def _sessions(url: str, token: str, count: int) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    async with aiohttp.ClientSession(url, headers=headers) as http:
        out = []
        for _ in range(count):
            async with http.post("/v1/sessions", json={}) as reply:
                out.append((await reply.json())["session_id"])
        return out


if __name__ == "__main__":
    raise SystemExit(main())
