"""The workload on the OpenAI Agents SDK: an ``Agent`` with one function tool, its history in a
``SQLiteSession``, a local ``Model`` (no network; tracing disabled).

Run by :mod:`bench.peers` in its own venv (``python -m bench.peers.agents_peer CASE``). Each run
is ``Runner.run(agent, TEXT, session=...)``; the SDK reads the session's history, calls the
model, runs the tool, calls the model again and adds the run's items to the session. The
session's connection's ``PRAGMA synchronous`` is reported (2 = FULL: an fsync per commit in WAL
mode). Concurrent sessions are asyncio tasks on one loop, as the SDK's runner is async.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import threading
import time
from typing import Any

from agents import (  # type: ignore[import-not-found]
    Agent,
    Model,
    ModelResponse,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import (  # type: ignore[import-not-found]
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from bench.peers.workload import (
    ECHO_ARGUMENTS,
    ECHO_TEXT,
    IDLE_BATCH,
    SYNCHRONOUS,
    TEXT,
    answer,
    child_main,
    cpu_s,
    idle_result,
    open_fds,
    rss_mib,
    runs_result,
)


@function_tool  # type: ignore[untyped-decorator]
def echo(text: str) -> str:
    """Return the given text unchanged."""
    return text


class AgentsLocalModel(Model):  # type: ignore[misc]
    """Answers like reel's deterministic model: the first turn proposes ``echo``, the turn after
    the tool's output answers the text."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> Any:
        last = input[-1] if isinstance(input, list) and input else None
        if isinstance(last, dict) and last.get("type") == "function_call_output":
            text = ResponseOutputText(
                text=answer(str(last["output"])), type="output_text", annotations=[]
            )
            item: Any = ResponseOutputMessage(
                id="msg_1", content=[text], role="assistant", status="completed", type="message"
            )
        else:
            item = ResponseFunctionToolCall(
                arguments=ECHO_ARGUMENTS,
                call_id="call_1",
                name="echo",
                type="function_call",
                id="fc_1",
                status="completed",
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        """The SDK's ``Model`` requires it; ``Runner.run`` (what the benchmark calls, as the
        peers' non-streamed runs) never does: a call is the benchmark's bug."""
        raise RuntimeError("bench.peers drives the Agents SDK with Runner.run, which never streams")


def make_agent() -> Any:
    set_tracing_disabled(True)
    return Agent(name="bench", instructions="Answer.", model=AgentsLocalModel(), tools=[echo])


async def run_once(agent: Any, session: Any) -> float:
    """One run in ``session``; returns its latency. Fails loudly on a wrong answer."""
    started = time.perf_counter()
    result = await Runner.run(agent, TEXT, session=session)
    latency = time.perf_counter() - started
    if result.final_output != answer(ECHO_TEXT):
        raise RuntimeError(f"unexpected answer: {result.final_output!r}")
    return latency


def synchronous(session: Any) -> str:
    """The session's connection's durability, as SQLite reports it."""
    return SYNCHRONOUS[session._get_connection().execute("PRAGMA synchronous").fetchone()[0]]


def single(args: argparse.Namespace, fresh: bool) -> dict[str, Any]:
    db = args.dir / "agents.db"
    agent = make_agent()

    async def main() -> dict[str, Any]:
        await run_once(agent, SQLiteSession("warm-up", db))
        kept = SQLiteSession("session", db)
        latencies: list[float] = []
        cpu, started = cpu_s(), time.perf_counter()
        for i in range(args.runs):
            session = SQLiteSession(f"run-{i}", db) if fresh else kept
            latencies.append(await run_once(agent, session))
            if fresh:
                session.close()
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu
        return runs_result(latencies, elapsed, cpu, synchronous=synchronous(kept))

    return asyncio.run(main())


async def closed_loop(
    agent: Any, db: Any, sessions: int, runs_each: int, prefix: str
) -> list[float]:
    """``sessions`` tasks, each running ``runs_each`` runs one after another in its own
    session; returns every run's latency."""

    async def lane(i: int) -> list[float]:
        session = SQLiteSession(f"{prefix}-{i}", db)
        try:
            return [await run_once(agent, session) for _ in range(runs_each)]
        finally:
            session.close()

    per_lane = await asyncio.gather(*(lane(i) for i in range(sessions)))
    return [latency for lane_latencies in per_lane for latency in lane_latencies]


def loop(args: argparse.Namespace) -> dict[str, Any]:
    db = args.dir / "agents.db"
    agent = make_agent()

    async def main() -> dict[str, Any]:
        await run_once(agent, SQLiteSession("warm-up", db))
        cpu, started = cpu_s(), time.perf_counter()
        latencies = await closed_loop(agent, db, args.sessions, args.runs_each, "lane")
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu
        return runs_result(
            latencies, elapsed, cpu, synchronous=synchronous(SQLiteSession("check", db))
        )

    return asyncio.run(main())


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """``args.idle`` sessions with one run each, then closed: the app keeps only their ids."""
    db = args.dir / "agents.db"
    agent = make_agent()

    async def main() -> dict[str, Any]:
        await run_once(agent, SQLiteSession("warm-up", db))
        gc.collect()
        before = threading.active_count(), rss_mib(), open_fds()
        for batch in range(args.idle // IDLE_BATCH):
            await closed_loop(agent, db, IDLE_BATCH, 1, f"idle-{batch}")
        gc.collect()
        return idle_result(args.idle, *before)

    return asyncio.run(main())


if __name__ == "__main__":
    child_main(
        {
            "single": lambda a: single(a, fresh=False),
            "single-fresh": lambda a: single(a, fresh=True),
            "loop": loop,
            "idle": idle,
        }
    )
