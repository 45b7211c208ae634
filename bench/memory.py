"""Memory search and context assembly, against the bare SQLite queries they stand on, in one run.

**Search** (``MemoryView.search``, k = 5, as a run's auto-injection and ``GET /v1/memory?q=``
call it) over a views.db of ``--sizes`` items (default 10,000 and 100,000) folded by the real
projector from ``memory.item_written`` events appended to a real journal. Items are 6-25 words
drawn from the English of reel's own docs, over three scopes (60% global, 30% of ten
principals, 10% of a hundred sessions); queries are 1-6 such words, searched as one principal
in one session. Reported: p50 and p99 over ``--queries`` queries after a warm-up on the first
30 of them (10 for e5-small). The view is long-lived, as a node's is: BM25's figures (each
word's document count) are kept between searches until a fold changes the index
(docs/memory.md); how many were counted in FTS5, against the query words searched, is printed.

The **ceiling**, on the same views.db in the same run, is what the search cannot do without:
one bare FTS5 query (the same ``OR`` of the query's words, ``ORDER BY bm25 LIMIT 50``) plus one
bare sqlite-vec KNN (``MATCH ? AND k = 50`` with the query's vector computed beforehand), on
a connection set up as the view's (read-only, memory-mapped), no filtering, no scoring. The
ratio is the search's p99 over the ceiling's (target: within 2x; and p99 under 50 ms at
100,000 items).

The hashing embedder runs at every size; ``e5-small`` (the ``embeddings`` extra) where it is
installed, at ``--e5-items`` (default 2,000: it folds ~30-100 items a second on 2 cores, so
10,000 take minutes; pass ``--e5-items 10000`` for that). For e5 the query's embedding (a model
call) is part of the search but not of the ceiling; its own p50 is printed beside.

**Context assembly** at a 1,000-turn session (``--turns``): a node (real journal, the
deterministic provider, the 10,000-item memory view wired as runs' memory) runs ``--turns``
runs one after another in one session; for the last 100 (and the first 100, for comparison)
the time from the commit of ``run.started`` to the commit of ``run.context_assembled`` is
taken from a journal listener (what the run does in between: the memory search, references,
building the event, and that event's one commit). A bare append's commit is measured in the
same run, so what assembly itself costs is the difference (target: under 10 ms). The session's
history (the prior turns within the budget) is built before ``run.started`` by the session;
``accepted->started`` is printed too.

Targets are printed as PASS/MISS, never asserted. Run: ``.venv/bin/python bench/memory.py``
(a few minutes on 2 cores; ``--sizes 10000 --turns 300`` for a quick look).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import apsw

from actors import ActorsConfig, Node, ToolGate
from actors.messages import RunTicket, StartRun
from events import Journal, NodeKey, new_id
from events.catalog import MemoryItemWritten
from policies import PolicyEngine
from projections import (
    Embedder,
    EmbedderUnavailable,
    MemoryView,
    Projector,
    all_projections,
    make_embedder,
)
from projections.memory.search import MMAP_BYTES, fts_match, fts_terms
from projections.memory.view import load_vec, pack_vector
from tools import ToolsConfig, build_catalog
from transports.models import DeterministicProvider

REPO = Path(__file__).resolve().parent.parent

TARGET_P99_MS = 50.0
TARGET_RATIO = 2.0
TARGET_ASSEMBLY_MS = 10.0
PRINCIPALS = [f"user:p{i}" for i in range(10)]
SESSIONS = [f"01J{i:023d}" for i in range(100)]
"""Session ids of session-scope items (ULID-shaped; the items need no session stream)."""
TERMINAL = ("run.completed", "run.failed", "run.cancelled")


def vocabulary() -> list[str]:
    """The distinct words of reel's own docs: real English (and some identifiers)."""
    words: set[str] = set()
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        words.update(re.findall(r"[a-z][a-z]{2,14}", path.read_text(encoding="utf-8").lower()))
    return sorted(words)


def p(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def timed(call: Callable[[], object], times: int) -> list[float]:
    out = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def verdict(met: bool) -> str:
    return "PASS" if met else "MISS"


# --- building a memory ----------------------------------------------------------------------


def build(work: Path, items: int, embedder: Embedder, words: list[str], seed: int) -> Path:
    """A journal of ``items`` memory writes and its views.db folded with ``embedder``; returns
    the views path. Prints the append and fold times."""
    rng = random.Random(seed)
    work.mkdir(parents=True, exist_ok=True)
    journal = Journal(work / "journal.db", synchronous="NORMAL")
    started = time.perf_counter()
    futures = []
    for n in range(items):
        roll = rng.random()
        fields: dict[str, object] = {"scope": "global"}
        principal = "operator"
        if roll < 0.3:
            principal = rng.choice(PRINCIPALS)
            fields = {"scope": "principal"}
        elif roll < 0.4:
            fields = {"scope": "session", "session_id": rng.choice(SESSIONS)}
        text = " ".join(rng.choices(words, k=rng.randint(6, 25)))
        item_id = f"01K{n:023d}"
        event = MemoryItemWritten(item_id=item_id, text=text, **fields)  # type: ignore[arg-type]
        futures.append(
            journal.submit(f"memory/{item_id}", [event], expected_seq=0, principal=principal)
        )
        if len(futures) >= 2000:
            for f in futures:
                f.result()
            futures.clear()
    for f in futures:
        f.result()
    appended = time.perf_counter() - started
    views = work / "views.db"
    started = time.perf_counter()
    projector = Projector(journal, views, all_projections(embedder))
    try:
        projector.catch_up()
    finally:
        projector.close()
    folded = time.perf_counter() - started
    journal.close(checkpoint=False)
    print(
        f"built      {items:>7,} items ({embedder.name}): appended in {appended:5.1f} s, folded in "
        f"{folded:6.1f} s ({items / folded:,.0f} items/s)"
    )
    return views


def queries(words: list[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.sample(words, rng.randint(1, 6))) for _ in range(n)]


# --- search against the bare queries --------------------------------------------------------


def bare_connection(views: Path) -> apsw.Connection:
    """A connection set up as the view's own: read-only, memory-mapped, sqlite-vec loaded."""
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
    load_vec(conn)
    return conn


def bench_search(views: Path, embedder: Embedder, texts: list[str], warm: int) -> None:
    view = MemoryView(views, embedder)
    conn = bare_connection(views)
    principal, session = PRINCIPALS[0], SESSIONS[0]
    try:
        vectors = [pack_vector(embedder.embed_query(q)) for q in texts]
        matches = [fts_match(fts_terms(q)) or '""' for q in texts]
        for q in texts[:warm]:
            view.search(q, 5, principal=principal, session_id=session)
        reel: list[float] = []
        bare: list[float] = []
        hits = 0
        # Interleaved, query by query, so that both see the same machine at the same moment.
        for q, vector, match in zip(texts, vectors, matches, strict=True):
            started = time.perf_counter()
            found = view.search(q, 5, principal=principal, session_id=session)
            reel.append((time.perf_counter() - started) * 1000)
            hits += bool(found)
            started = time.perf_counter()
            conn.execute(
                "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? "
                "ORDER BY bm25(memory_fts) LIMIT 50",
                (match,),
            ).fetchall()
            conn.execute(
                "SELECT item_row, distance FROM memory_vec WHERE embedding MATCH ? AND k = 50",
                (vector,),
            ).fetchall()
            bare.append((time.perf_counter() - started) * 1000)
        counted = view.statistics.counted
        words = sum(len(fts_terms(q)) for q in [*texts[:warm], *texts])
        embed_ms = []
        for q in texts:
            started = time.perf_counter()
            embedder.embed_query(q)
            embed_ms.append((time.perf_counter() - started) * 1000)
        items: int = conn.execute("SELECT count(*) FROM memory_items").get
    finally:
        conn.close()
        view.close()
    ratio = p(reel, 99) / p(bare, 99)
    checks = [f"ratio {verdict(ratio <= TARGET_RATIO)}"]
    if items >= 100_000:
        checks.insert(0, f"p99<{TARGET_P99_MS:.0f}ms {verdict(p(reel, 99) < TARGET_P99_MS)}")
    print(
        f"search     {items:>7,} {embedder.name:<8} p50 {statistics.median(reel):6.2f} ms  "
        f"p99 {p(reel, 99):6.2f} ms | bare FTS5+KNN p50 {statistics.median(bare):6.2f} ms  "
        f"p99 {p(bare, 99):6.2f} ms | p99 ratio {ratio:4.2f}x  {'  '.join(checks)}"
    )
    print(
        f"           ({len(texts)} queries, {hits} with hits; the query's embedding alone "
        f"p50 {statistics.median(embed_ms):.2f} ms, inside the search, outside the ceiling; "
        f"BM25 figures counted in FTS5 {counted:,} for {words:,} query words, the rest kept)"
    )


# --- context assembly at a long session -------------------------------------------------------


class Commits:
    """Commit times per journal position (a listener in the writer thread)."""

    def __init__(self, journal: Journal) -> None:
        self.at: dict[int, float] = {}
        self.last = 0
        self.lock = threading.Lock()
        journal.listen(self.heard)

    def heard(self, position: int) -> None:
        now = time.perf_counter()
        with self.lock:
            for pos in range(self.last + 1, position + 1):
                self.at[pos] = now
            self.last = max(self.last, position)


def bench_assembly(work: Path, memory_views: Path, turns: int) -> None:
    work.mkdir(parents=True)
    workspace = work / "workspace"
    workspace.mkdir()
    journal = Journal(work / "journal.db", node_key=NodeKey.load_or_create(work / "node.key"))
    commits = Commits(journal)
    view = MemoryView(memory_views)
    node = Node(
        journal=journal,
        provider=DeterministicProvider(),
        catalog=build_catalog(ToolsConfig(workspace_dir=str(workspace))),
        gate=ToolGate(PolicyEngine.load(None)),
        workspace=workspace,
        config=ActorsConfig(idle_passivate_s=60.0),
        memory=view,
    )
    node.start()
    words = vocabulary()
    rng = random.Random(7)
    runs: list[str] = []
    texts: list[str] = []
    session_id: str | None = None
    started = time.perf_counter()
    try:
        for n in range(turns):
            text = f"turn {n}: " + " ".join(rng.choices(words, k=rng.randint(8, 30)))
            command = (
                StartRun(text=text, create=True)
                if session_id is None
                else StartRun(text=text, session_id=session_id)
            )
            ticket = node.ask(command, timeout=30)
            assert isinstance(ticket, RunTicket)
            session_id = ticket.session_id
            runs.append(ticket.run_id)
            texts.append(text)
            deadline = time.monotonic() + 30
            while not any(s.kind in TERMINAL for s in journal.read_correlated(ticket.run_id)):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"run {n} did not end")
                journal.wait_for(journal.committed_position, timeout=0.05)
        elapsed = time.perf_counter() - started
        # A bare append's commit, in the same journal, right after.
        commit = timed(
            lambda: journal.append(
                "bench/commit", [MemoryItemWritten(item_id=new_id(), text="x")], expected_seq=None
            ),
            100,
        )
        # What the memory search of each message costs alone (the run searches with its text).
        cfg = node.services.config
        search = []
        for text in texts[-100:]:
            begun = time.perf_counter()
            view.search(text, cfg.memory_inject_k, principal="admin")
            search.append((time.perf_counter() - begun) * 1000)
    finally:
        node.stop(grace_s=1.0)
        view.close()
    assembled: dict[str, float] = {}
    waited: dict[str, float] = {}
    compactions = 0
    for stored in journal.read(0, limit=10_000_000):
        run = stored.correlation_id
        if stored.kind == "session.compacted":
            compactions += 1
        if run is None:
            continue
        at = commits.at.get(stored.position)
        if at is None:
            continue
        if stored.kind == "run.accepted":
            waited[run] = -at
        elif stored.kind == "run.started":
            waited[run] = waited.get(run, 0.0) + at
            assembled[run] = -at
        elif stored.kind == "run.context_assembled" and run in assembled:
            assembled[run] += at
    journal.close()

    def ms(ids: list[str], table: dict[str, float]) -> list[float]:
        return [table[r] * 1000 for r in ids if r in table]

    print(
        f"session    {turns:,} runs in one session in {elapsed:.1f} s ({turns / elapsed:.0f} "
        f"runs/s); {compactions} compaction(s); memory: {memory_views.parent.name}"
    )
    bare = statistics.median(commit)
    for label, ids in (("first 100", runs[:100]), ("last 100", runs[-100:])):
        a = ms(ids, assembled)
        w = ms(ids, waited)
        print(
            f"assembly   {label:<9} started->context_assembled p50 {statistics.median(a):6.2f} ms "
            f"p99 {p(a, 99):6.2f} ms | accepted->started p50 {statistics.median(w):6.2f} ms"
        )
    last = ms(runs[-100:], assembled)
    net = statistics.median(last) - bare
    searched = statistics.median(search)
    print(
        f"           a bare append's commit p50 {bare:.2f} ms p99 {p(commit, 99):.2f} ms; the "
        f"memory search of the same messages alone p50 {searched:.2f} ms p99 {p(search, 99):.2f} ms"
    )
    print(
        f"           assembly at {turns:,} turns ~{net:.2f} ms (p50 less one commit)  "
        f"<{TARGET_ASSEMBLY_MS:.0f}ms {verdict(net < TARGET_ASSEMBLY_MS)}; without the memory "
        f"search ~{net - searched:.2f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="item counts, comma-separated")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--e5-items", type=int, default=2000, help="0 skips e5-small")
    parser.add_argument("--turns", type=int, default=1000, help="0 skips context assembly")
    parser.add_argument("--dir", type=Path, default=None, help="work dir (default: a temp dir)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"machine    {os.cpu_count()} cores, load average {load} (1/5/15 min) at start; "
        f"python {platform.python_version()}; sqlite {apsw.sqlite_lib_version()}"
    )
    words = vocabulary()
    texts = queries(words, args.queries, seed=11)
    with tempfile.TemporaryDirectory(prefix="reel-bench-memory-", dir=args.dir) as scratch:
        root = Path(scratch)
        hashing = make_embedder("hashing")
        built: dict[int, Path] = {}
        for size in sizes:
            built[size] = build(root / f"hashing-{size}", size, hashing, words, seed=size)
            bench_search(built[size], hashing, texts, warm=30)
        if args.e5_items:
            try:
                e5 = make_embedder("e5-small")
            except EmbedderUnavailable as exc:
                print(f"e5-small   skipped: {exc}")
            else:
                views = build(root / f"e5-{args.e5_items}", args.e5_items, e5, words, seed=5)
                bench_search(views, e5, texts[: max(50, args.queries // 3)], warm=10)
        if args.turns:
            memory = built.get(10_000) or build(root / "hashing-10000", 10_000, hashing, words, 1)
            bench_assembly(root / "assembly", memory, args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
