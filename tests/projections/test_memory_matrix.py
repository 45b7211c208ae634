"""The memory index's vectors held as one matrix in memory (projections/memory/matrix.py): its
nearest neighbours are sqlite-vec's, the search's results are the same with it as without it,
a node's projection keeps it current (writes, rewrites, deletes, a rolled-back batch) without
reloading it, and a search whose snapshot it does not hold reads sqlite-vec instead."""

from __future__ import annotations

import itertools
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import apsw
import pytest

from events import Journal
from projections import HashingEmbedder, MemoryView, Projector, all_projections
from projections.memory.matrix import VectorMatrix
from projections.memory.search import MemoryHit, audiences
from projections.memory.view import NO_EXPIRY, audience_key, load_vec, pack_vector
from tests.projections.memory_kit import delete, fold, write
from tests.projections.test_memory import FailingOnce

REPO = Path(__file__).resolve().parents[2]
PRINCIPALS = [f"user:p{i}" for i in range(4)]
SESSIONS = [f"01J{i:023d}" for i in range(6)]
NOW = 2_000_000_000_000
"""Every search's clock: after the expiry of the items given one in the past."""


def vocabulary() -> list[str]:
    """The words of reel's README, as bench/memory.py draws its items from the docs."""
    text = (REPO / "README.md").read_text(encoding="utf-8").lower()
    return sorted(set(re.findall(r"[a-z][a-z]{2,14}", text)))


def corpus(journal: Journal, items: int, seed: int = 3) -> list[str]:
    """``items`` memory writes as bench/memory.py makes them (60% global, 30% of a principal,
    10% of a session), a tenth expired or expiring later, then a tenth rewritten and a tenth
    deleted; returns the queries (1-6 of the same words)."""
    rng = random.Random(seed)
    words = vocabulary()
    for n in range(items):
        roll = rng.random()
        fields: dict[str, object] = {"scope": "global"}
        principal = "operator"
        if roll < 0.3:
            principal = rng.choice(PRINCIPALS)
            fields = {"scope": "principal"}
        elif roll < 0.4:
            fields = {"scope": "session", "session_id": rng.choice(SESSIONS)}
        if rng.random() < 0.1:
            fields["expires_at_ms"] = NOW + rng.choice((-1, 1)) * 86_400_000
        text = " ".join(rng.choices(words, k=rng.randint(6, 25)))
        write(journal, f"m{n:04d}", text, principal=principal, **fields)
    for n in rng.sample(range(items), items // 10):
        write(journal, f"m{n:04d}", " ".join(rng.choices(words, k=12)), scope="global")
    for n in rng.sample(range(items), items // 10):
        delete(journal, f"m{n:04d}")
    return [" ".join(rng.sample(words, rng.randint(1, 6))) for _ in range(120)]


def view(views: Path, matrix: VectorMatrix | None = None, *, in_memory: bool = True) -> MemoryView:
    v = MemoryView(views, HashingEmbedder(), clock=lambda: NOW, matrix=matrix)
    if not in_memory:
        v.matrix = None
    return v


def searched(v: MemoryView, query: str, who: int) -> list[tuple[str, float]]:
    """The hits of ``query`` for one of several callers: their ids and final scores."""
    principal, session = PRINCIPALS[who % 4], SESSIONS[who % 6]
    hits: list[MemoryHit] = v.search(query, 8, principal=principal, session_id=session)
    return [(h.item.item_id, h.final) for h in hits]


@contextmanager
def readonly(views: Path) -> Iterator[apsw.Connection]:
    """A read-only connection to ``views`` with sqlite-vec, as a view's."""
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    load_vec(conn)
    try:
        yield conn
    finally:
        conn.close()


def generation(conn: apsw.Connection) -> int:
    return int(conn.execute("SELECT changed_at FROM memory_index").get)


def test_its_nearest_rows_are_sqlite_vecs(journal: Journal, views: Path) -> None:
    """For every query and several audiences, the ``k`` nearest visible unexpired rows by the
    matrix are those of sqlite-vec's filtered KNN, in its order (rows whose distances differ
    by float rounding only may swap)."""
    queries = corpus(journal, 300)
    fold(journal, views)
    embedder = HashingEmbedder()
    matrix = VectorMatrix()
    compared = 0
    with readonly(views) as conn:
        for n, query in enumerate(queries):
            compared += compare_nearest(conn, matrix, embedder.embed_query(query), n)
    assert matrix.loads == 1
    assert compared > 5_000


def compare_nearest(conn: apsw.Connection, matrix: VectorMatrix, qvec: list[float], n: int) -> int:
    """Check the matrix's nearest rows for caller ``n`` against sqlite-vec's; how many."""
    seen = audiences(PRINCIPALS[n % 4], SESSIONS[n % 6])
    keys = [audience_key(a) for a in seen]
    k = (5, 50, 400)[n % 3]
    conn.execute("BEGIN")
    try:
        rows = matrix.nearest(conn, generation(conn), qvec, k, keys, NOW)
        expected = conn.execute(
            "SELECT item_row, distance FROM memory_vec WHERE embedding MATCH ? AND k = ?"
            f" AND audience_key IN ({','.join('?' * len(keys))}) AND expires_at_ms > ?",
            (pack_vector(qvec), k, *keys, NOW),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    assert rows is not None
    distance = {cast(int, row): cast(float, d) for row, d in expected}
    assert sorted(rows) == sorted(distance)
    ordered = [distance[row] for row in rows]
    assert all(b >= a - 1e-6 for a, b in itertools.pairwise(ordered))
    return len(rows)


def test_the_search_finds_the_same_items_in_the_same_order_with_it_as_without_it(
    journal: Journal, views: Path
) -> None:
    queries = corpus(journal, 300)
    fold(journal, views)
    with_matrix, without = view(views), view(views, in_memory=False)
    try:
        for n, query in enumerate(queries):
            assert searched(with_matrix, query, n) == searched(without, query, n), query
        assert with_matrix.matrix is not None and with_matrix.matrix.loads == 1
        assert with_matrix.matrix.generation is not None
    finally:
        with_matrix.close()
        without.close()


def test_a_nodes_projection_keeps_it_current_without_reloading(
    journal: Journal, views: Path
) -> None:
    """Loaded once, then writes, rewrites and deletes folded by a projector that holds the same
    matrix: it follows each batch (one load in all), and searches still equal sqlite-vec's."""
    queries = corpus(journal, 200)
    embedder = HashingEmbedder()
    v = view(views)
    assert v.matrix is not None
    projector = Projector(journal, views, all_projections(None, v.matrix), batch=37)
    reference = view(views, in_memory=False)
    try:
        projector.catch_up()
        assert searched(v, queries[0], 0) == searched(reference, queries[0], 0)
        assert v.matrix.loads == 1
        rng = random.Random(9)
        words = vocabulary()
        for round_ in range(4):
            for n in rng.sample(range(200), 15):
                write(journal, f"m{n:04d}", " ".join(rng.choices(words, k=10)), scope="global")
            for n in rng.sample(range(200), 10):
                delete(journal, f"m{n:04d}")
            write(journal, f"new{round_}", "zeppelin quasar marmalade", scope="global")
            projector.catch_up()
            with v._read() as conn:
                assert v.matrix.generation == generation(conn)
            with readonly(views) as conn:  # k = 400: every row the caller may see
                for n, query in enumerate(queries[:3]):
                    compare_nearest(conn, v.matrix, embedder.embed_query(query), 3 * n + 2)
            assert searched(v, "zeppelin marmalade", 1)[0][0] == f"new{round_}"
            for n, query in enumerate(queries[:30]):
                assert searched(v, query, n) == searched(reference, query, n)
        assert v.matrix.loads == 1
    finally:
        projector.close()
        v.close()
        reference.close()


def test_a_rolled_back_batch_leaves_it_as_it_was(journal: Journal, views: Path) -> None:
    corpus(journal, 50)
    v = view(views)
    assert v.matrix is not None
    fold(journal, views)
    searched(v, "anything at all", 0)
    before = v.matrix.generation
    write(journal, "late", "zeppelin quasar marmalade", scope="global")
    projector = Projector(journal, views, all_projections(FailingOnce(), v.matrix))
    try:
        searched(v, "anything at all", 0)  # the projector's start dropped it: loaded again
        assert v.matrix.generation == before
        with pytest.raises(RuntimeError, match="model crashed"):
            projector.catch_up()
        assert v.matrix.generation == before
        projector.catch_up()
        assert v.matrix.generation != before
    finally:
        projector.close()
    assert searched(v, "zeppelin quasar", 0)[0][0] == "late"
    assert v.matrix.loads == 2


def test_a_search_at_a_generation_it_does_not_hold_reads_sqlite_vec(
    journal: Journal, views: Path
) -> None:
    """A matrix a projection keeps is not reloaded for a newer snapshot (the projection brings
    it there): that search reads sqlite-vec and finds what the matrix lacks. A view no
    projection keeps reloads it."""
    corpus(journal, 50)
    fold(journal, views)
    kept = VectorMatrix()
    kept.kept = True
    followed, alone = view(views, kept), view(views)
    assert alone.matrix is not None
    try:
        searched(followed, "anything", 0)
        searched(alone, "anything", 0)
        write(journal, "late", "zeppelin quasar marmalade", scope="global")
        fold(journal, views)  # a projector without either matrix
        assert searched(followed, "zeppelin quasar", 0)[0][0] == "late"
        assert kept.loads == 1
        with followed._read() as conn:
            assert kept.generation != generation(conn)
            assert kept.nearest(conn, generation(conn), [0.1] * 256, 5, [0], NOW) is None
        assert searched(alone, "zeppelin quasar", 0)[0][0] == "late"
        assert alone.matrix.loads == 2
    finally:
        followed.close()
        alone.close()


def test_an_empty_memory_then_its_first_items(journal: Journal, views: Path) -> None:
    """First run: a search of the empty memory loads nothing (it looks no further than the
    empty table); the first items are loaded by the first search after them, and found."""
    v = view(views)
    assert v.matrix is not None
    projector = Projector(journal, views, all_projections(None, v.matrix))
    try:
        assert searched(v, "nothing in common", 0) == []
        assert v.matrix.loads == 0 and v.matrix.nbytes() == 0
        write(journal, "m1", "zeppelin quasar marmalade", scope="global")
        projector.catch_up()
        assert [i for i, _ in searched(v, "quasars", 0)] == ["m1"]
        assert v.matrix.loads == 1 and v.matrix.nbytes() > 256 * 4
    finally:
        projector.close()
        v.close()


def test_the_projector_opening_views_db_drops_it(journal: Journal, views: Path) -> None:
    write(journal, "m1", "zeppelin quasar marmalade", scope="global")
    fold(journal, views)
    v = view(views)
    assert v.matrix is not None
    searched(v, "zeppelin", 0)
    assert v.matrix.generation is not None
    Projector(journal, views, all_projections(None, v.matrix)).close()
    assert v.matrix.generation is None
    assert [i for i, _ in searched(v, "zeppelin", 0)] == ["m1"]
    assert v.matrix.loads == 2
    v.close()


def test_expiry_never_overflows_the_filter(journal: Journal, views: Path) -> None:
    """An item without expiry is stored with the largest int64 and stays visible at any time."""
    write(journal, "m1", "zeppelin quasar marmalade", scope="global")
    fold(journal, views)
    v = MemoryView(views, HashingEmbedder(), clock=lambda: NO_EXPIRY)
    try:
        assert [h.item.item_id for h in v.search("zeppelin")] == ["m1"]
    finally:
        v.close()


BLAS_PROBE = """
import os, sys
from projections.memory.matrix import load_numpy
np = load_numpy()
np.ones((3000, 256), dtype=np.float32) @ np.ones(256, dtype=np.float32)
print(len(os.listdir("/proc/self/task")), "OPENBLAS_NUM_THREADS" in os.environ)
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: OpenBLAS starts no thread")
def test_numpy_is_loaded_with_its_blas_on_one_thread_and_leaves_no_variable() -> None:
    """In a fresh process (numpy not yet imported) the product runs on the calling thread:
    OpenBLAS started no thread of its own, and no child process would inherit the setting."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    probe = subprocess.run(
        [sys.executable, "-c", BLAS_PROBE], env=env, capture_output=True, text=True, check=True
    )
    assert probe.stdout.split() == ["1", "False"]
    plain = BLAS_PROBE.replace("load_numpy()", "__import__('numpy')")
    control = subprocess.run(
        [sys.executable, "-c", plain], env=env, capture_output=True, text=True, check=True
    )
    assert control.stdout.split()[0] != "1"  # the probe can tell: plain numpy starts threads
