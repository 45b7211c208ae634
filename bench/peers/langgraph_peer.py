"""The workload on LangGraph: a tool-calling agent graph checkpointed by ``SqliteSaver``.

Run by :mod:`bench.peers` in its own venv (``python -m bench.peers.langgraph_peer CASE``). The
graph is the one LangGraph's documentation builds for an agent: a model node and the prebuilt
``ToolNode``, routed by ``tools_condition``, over ``MessagesState``; the model is a local
``BaseChatModel`` that answers as reel's deterministic model does. Every ``invoke`` passes
``durability="sync"``: each step's checkpoint is committed before the next step runs. One
``SqliteSaver`` on one connection serves every thread, as in LangGraph's own examples; its
``PRAGMA synchronous`` is reported (2 = FULL: an fsync per commit in WAL mode).
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from langchain_core.language_models import BaseChatModel  # type: ignore[import-not-found]
from langchain_core.messages import AIMessage, ToolMessage  # type: ignore[import-not-found]
from langchain_core.outputs import ChatGeneration, ChatResult  # type: ignore[import-not-found]
from langchain_core.tools import tool  # type: ignore[import-not-found]
from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found]
from langgraph.graph import START, MessagesState, StateGraph  # type: ignore[import-not-found]
from langgraph.prebuilt import ToolNode, tools_condition  # type: ignore[import-not-found]

from bench.peers.workload import (
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


@tool  # type: ignore[untyped-decorator]
def echo(text: str) -> str:
    """Return the given text unchanged."""
    return text


class LangGraphLocalModel(BaseChatModel):  # type: ignore[misc]
    """Answers like reel's deterministic model: the first turn proposes ``echo``, the turn after
    the tool's result answers the text."""

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            message = AIMessage(content=answer(str(last.content)))
        else:
            calls = sum(len(getattr(m, "tool_calls", ())) for m in messages)
            call = {"name": "echo", "args": {"text": ECHO_TEXT}, "id": f"call_{calls + 1}"}
            message = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=message)])

    @property
    def _llm_type(self) -> str:
        return "local-deterministic"


@contextmanager
def agent(args: argparse.Namespace) -> Iterator[tuple[Any, sqlite3.Connection]]:
    """The compiled graph over a fresh checkpoint database, and its connection."""
    conn = sqlite3.connect(args.dir / "langgraph.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    model = LangGraphLocalModel()

    def call_model(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([echo]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    try:
        yield graph.compile(checkpointer=saver), conn
    finally:
        conn.close()


def run_once(app: Any, thread_id: str) -> float:
    """One run in ``thread_id``; returns its latency. Fails loudly on a wrong answer."""
    started = time.perf_counter()
    out = app.invoke(
        {"messages": [("user", TEXT)]},
        {"configurable": {"thread_id": thread_id}},
        durability="sync",
    )
    latency = time.perf_counter() - started
    if out["messages"][-1].content != answer(ECHO_TEXT):
        raise RuntimeError(f"unexpected answer: {out['messages'][-1].content!r}")
    return latency


def synchronous(conn: sqlite3.Connection) -> str:
    """The checkpoint connection's durability, as SQLite reports it."""
    return SYNCHRONOUS[conn.execute("PRAGMA synchronous").fetchone()[0]]


def single(args: argparse.Namespace, fresh: bool) -> dict[str, Any]:
    with agent(args) as (app, conn):
        run_once(app, "warm-up")
        latencies: list[float] = []
        cpu, started = cpu_s(), time.perf_counter()
        for i in range(args.runs):
            latencies.append(run_once(app, f"run-{i}" if fresh else "session"))
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu
        return runs_result(latencies, elapsed, cpu, synchronous=synchronous(conn))


def closed_loop(app: Any, sessions: int, runs_each: int, prefix: str) -> list[float]:
    """``sessions`` threads, each running ``runs_each`` runs one after another in its own
    LangGraph thread; returns every run's latency."""
    latencies: list[float] = []
    errors: list[BaseException] = []
    gate = threading.Barrier(sessions)

    def lane(i: int) -> None:
        gate.wait()
        try:
            for _ in range(runs_each):
                latencies.append(run_once(app, f"{prefix}-{i}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=lane, args=(i,)) for i in range(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} session(s) failed; first: {errors[0]!r}")
    return latencies


def loop(args: argparse.Namespace) -> dict[str, Any]:
    with agent(args) as (app, conn):
        run_once(app, "warm-up")
        cpu, started = cpu_s(), time.perf_counter()
        latencies = closed_loop(app, args.sessions, args.runs_each, "lane")
        elapsed, cpu = time.perf_counter() - started, cpu_s() - cpu
        return runs_result(latencies, elapsed, cpu, synchronous=synchronous(conn))


def idle(args: argparse.Namespace) -> dict[str, Any]:
    """``args.idle`` threads with one run each, then left alone: the app keeps nothing of them
    (a LangGraph thread is its rows in the checkpoint database)."""
    with agent(args) as (app, _):
        run_once(app, "warm-up")
        gc.collect()
        before = threading.active_count(), rss_mib(), open_fds()
        for batch in range(args.idle // IDLE_BATCH):
            closed_loop(app, IDLE_BATCH, 1, f"idle-{batch}")
        gc.collect()
        return idle_result(args.idle, *before)


if __name__ == "__main__":
    child_main(
        {
            "single": lambda a: single(a, fresh=False),
            "single-fresh": lambda a: single(a, fresh=True),
            "loop": loop,
            "idle": idle,
        }
    )
