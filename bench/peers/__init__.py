"""reel next to the systems an operator would pick instead, on the same workload, in one run.

**What is compared.** The workload of ``bench/runs.py``: a run is one message answered in two
model turns with one call of an ``echo`` tool in between, by a deterministic local model (no
network), with the session's history kept durably in SQLite. It runs on

- reel (``reel_peer``): the node as ``bench/runs.py`` composes it (journal, actors, Cedar,
  builtin tools), driven by its ``Driver`` (ends learnt by subscription); and, for one case,
  the daemon's full composition (``open_runtime``: views, memory, learning, watchdog);
- LangGraph 1.2.24 (``langgraph_peer``): an agent graph (model node, prebuilt ``ToolNode``,
  ``tools_condition``) checkpointed by ``SqliteSaver``, invoked with ``durability="sync"``;
- the OpenAI Agents SDK 0.24.0 (``agents_peer``): an ``Agent`` with a function tool, a local
  ``Model`` subclass, tracing off, history in a ``SQLiteSession``.

Cases (each in a fresh process, alternated: every round runs each system once per case, in an
order rotated from round to round; medians over rounds):

- ``single``: ``--runs`` runs one after another: reel in one session, node only and with its
  full composition (``full-single``); the peers with a fresh thread/session per run
  (``single-fresh``: bounded history, the cheapest way to use them).
- ``long``: the same, every system in one session whose history grows run after run.
- ``loop``: ``--sessions`` sessions (100) each running ``--runs-each`` runs (10) one after
  another, all at once (a closed loop): throughput and p99 latency. reel's sessions are its
  actors; LangGraph's are OS threads sharing one ``SqliteSaver``; the Agents SDK's are asyncio
  tasks, each with its own ``SQLiteSession`` on one database file.
- ``idle``: ``--idle`` sessions (2,000), each with one run (100 at a time), then left alone:
  live threads, RSS and open fds against the same process before they existed. reel's
  sessions passivate under the shipped settings; the peers keep nothing of an idle session
  but its id (its rows are in SQLite; Agents SDK sessions are closed).

Targets (printed PASS/MISS, never asserted; issue 23): one session sequential >= 1.5x both
peers with a fresh thread/session per run; reel's full composition >= 1.2x the Agents SDK fresh
session; the closed loop >= 3x both peers' runs/s with p99 <= 1/3 of theirs.

**Why it is fair.** The same message and the same model answers: every model proposes
``echo({"text": "hi"})`` first and then answers the same text, and every child checks the
answer it got. Each system's history is durable in SQLite in WAL mode with
``synchronous=FULL`` (an fsync per commit; each child reports its connection's setting) at the
granularity it offers: reel commits 9 times per run (10 events), LangGraph 9 (a checkpoint and
its writes per step, ``durability="sync"``), the Agents SDK 3 (the input and the run's items:
it has no per-step setting, which favours it). Every latency runs from the call that starts a
run to the moment its end is durable: ``invoke`` / ``Runner.run`` returning, reel's
``run.completed`` commit. Warm-up runs (imports, first call) are not measured.

**How to run.** ``.venv/bin/python -m bench.peers`` from the checkout (``--help`` for the
sizes; ``--cases loop`` for one case). The first run makes each peer's venv under
``.cache/bench-peers/`` (gitignored) from the pinned requirements next to this file
(``langgraph.txt``, ``agents.txt``: every package ``==``-pinned, installed ``--no-deps``)
with reel's interpreter; a changed pin list makes it again. The peers are dev-only: nothing in
``pyproject.toml`` names them. With the defaults (3 rounds) it took 35 minutes on this 2-core
machine at load 8-23, most of it the peers' ``long`` runs (their history grows, and every run
reads and writes all of it); ``--cases single,loop`` took 10.
"""
