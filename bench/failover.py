"""Failover: what a turn pays when its first endpoint's circuit is open and the second answers.

In one process, on one event loop:

- a loopback aiohttp server streaming an OpenAI chat completion (five text chunks, a usage
  chunk, ``[DONE]``), as a compatible server does;
- ``direct``: a :class:`~transports.models.failover.FailoverProvider` over that server alone;
- ``failover``: one over ``[dead, live]``, where ``dead`` is a loopback port nothing listens on
  and its circuit was opened before timing (by three refused connections), so each turn skips
  it without a request and streams from ``live``;
- ``cold``: the same list with ``dead``'s circuit closed again before every turn, for what a
  refused connection costs (information only: the target is for an open circuit).

Each turn is timed from ``stream()`` to its ``TurnEnd``. The variants alternate, ``--rounds``
rounds of ``--turns`` turns each, so they see the same load; the figure is the median of the
per-round medians of ``failover`` minus ``direct``. Target: < 50 ms, printed as PASS/MISS,
never asserted.

Run: ``.venv/bin/python bench/failover.py [--rounds 5] [--turns 200]`` (a few seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import statistics
import sys
import time
from contextlib import aclosing

from aiohttp import web

from actors.provider import ChatMessage, ProviderRequest, TurnEnd
from transports.models.endpoints import EndpointConfig
from transports.models.failover import FailoverProvider

TARGET_MS = 50.0
REQUEST = ProviderRequest(messages=(ChatMessage(role="user", content="hello"),))


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    payload = {"model": "bench-model", "choices": [choice]}
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


BODY = [
    *(_chunk({"content": word}) for word in ("one ", "two ", "three ", "four ", "five")),
    _chunk({}, "stop"),
    b'data: {"model": "bench-model", "choices": [], '
    b'"usage": {"prompt_tokens": 3, "completion_tokens": 5}}\n\n',
    b"data: [DONE]\n\n",
]


async def _answer(request: web.Request) -> web.StreamResponse:
    await request.read()
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for piece in BODY:
        await response.write(piece)
    await response.write_eof()
    return response


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _turn(provider: FailoverProvider) -> float:
    started = time.perf_counter()
    async with aclosing(provider.stream(REQUEST)) as events:
        async for event in events:
            if isinstance(event, TurnEnd):
                break
    return (time.perf_counter() - started) * 1000


async def main(rounds: int, turns: int) -> int:
    logging.getLogger("reel.provider").setLevel(logging.ERROR)  # cold's refusals, each turn
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    live = EndpointConfig(
        kind="openai", name="live", base_url=f"http://127.0.0.1:{port}/v1", model="bench-model"
    )
    dead = EndpointConfig(
        kind="openai",
        name="dead",
        base_url=f"http://127.0.0.1:{_free_port()}/v1",
        model="m",
        max_retries=0,
        failure_threshold=1,
        cooldown_s=3600,
    )
    direct = FailoverProvider([live])
    failover = FailoverProvider([dead, live])
    cold = FailoverProvider([dead, live])
    await _turn(failover)  # opens dead's circuit (one refused connection)
    assert failover.statuses()[0].state == "open"
    figures: dict[str, list[float]] = {"direct": [], "failover": [], "cold": []}
    try:
        for _ in range(3):  # warm the pools
            await _turn(direct)
            await _turn(failover)
        for _ in range(rounds):
            for name, provider in (("direct", direct), ("failover", failover), ("cold", cold)):
                times = []
                for _ in range(turns):
                    if provider is cold:
                        cold.endpoints[0].breaker.success()  # closed: the refused connect again
                    times.append(await _turn(provider))
                figures[name].append(statistics.median(times))
    finally:
        for provider in (direct, failover, cold):
            await provider.aclose()
        await runner.cleanup()
    medians = {name: statistics.median(values) for name, values in figures.items()}
    added = medians["failover"] - medians["direct"]
    load = os.getloadavg()
    print(
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {rounds} rounds x {turns} turns"
    )
    for name, values in figures.items():
        rounds_ms = ", ".join(f"{v:.2f}" for v in values)
        print(f"{name:<9} median turn {medians[name]:7.2f} ms  (rounds: {rounds_ms})")
    verdict = "PASS" if added < TARGET_MS else "MISS"
    print(f"failover, first circuit open: +{added:.2f} ms a turn (< {TARGET_MS:g} ms): {verdict}")
    refused = medians["cold"] - medians["direct"]
    print(f"a refused connection first (circuit closed): +{refused:.2f} ms a turn")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.rounds, args.turns)))
