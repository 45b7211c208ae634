"""What the memory search keeps between searches never ranks wrongly: BM25's figures are kept
per generation (``memory_index.changed_at``, moved by every fold that changes the index and by
nothing else), so a long-lived view scores exactly as a fresh one after writes, rewrites,
deletes and expiry; and the lexical candidates found among the best rows whoever sees them are
the ones the filtered FTS5 walk finds."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import apsw
import pytest

from events import Journal
from projections import MemoryHit, MemoryView
from projections.memory import bm25 as memory_bm25
from projections.memory.search import audiences, fts_match, fts_terms
from projections.memory.stats import StatisticsCache
from projections.memory.view import NO_EXPIRY, audience_key, pack_vector
from tests.projections.memory_kit import delete, fold, write

QUERIES = ["garage parking", "parking code", "tea", "deploys tuesday", "garage tea deploys"]
CALLERS = [("user:alice", "S1"), ("user:bob", None), (None, None)]


def changed_at(views: Path) -> int:
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return cast(int, conn.execute("SELECT changed_at FROM memory_index").get)
    finally:
        conn.close()


def results(v: MemoryView, now_ms: int) -> list[list[tuple[str, float, float, float, float]]]:
    return [
        [
            (h.item.item_id, h.lexical, h.vector, h.recency, h.final)
            for h in v.search(q, k=10, principal=p, session_id=s, now_ms=now_ms)
        ]
        for q in QUERIES
        for p, s in CALLERS
    ]


def assert_same_as_a_fresh_view(kept: MemoryView, views: Path, now_ms: int = 1) -> None:
    fresh = MemoryView(views)
    try:
        assert results(kept, now_ms) == results(fresh, now_ms)
    finally:
        fresh.close()


def test_the_generation_moves_exactly_when_the_fold_changes_the_index(
    journal: Journal, views: Path
) -> None:
    fold(journal, views)
    assert changed_at(views) == 0
    written = write(journal, "a", "parking code for the garage", scope="global")
    write(journal, "other", "x", scope="global")
    delete(journal, "other")
    fold(journal, views)
    deleted = journal.head().position
    assert changed_at(views) == deleted
    delete(journal, "nobody")  # nothing to forget: the index is the same
    delete(journal, "other")  # already forgotten
    fold(journal, views)
    assert changed_at(views) == deleted
    rewritten = write(journal, "a", "parking code for the garage is 4711", scope="global")
    fold(journal, views)
    assert changed_at(views) == rewritten.last_position > written.last_position
    fold(journal, views)  # a projector starting again runs the DDL again: the value stays
    assert changed_at(views) == rewritten.last_position


def test_a_long_lived_view_scores_as_a_fresh_one_after_every_change(
    journal: Journal, views: Path
) -> None:
    write(journal, "a", "parking code for the garage", scope="global", expires_at_ms=50)
    write(journal, "b", "green tea without sugar", scope="principal", principal="user:alice")
    write(journal, "c", "deploys happen on tuesday", scope="session", session_id="S1")
    fold(journal, views)
    kept = MemoryView(views)
    assert_same_as_a_fresh_view(kept, views)
    steps: list[Callable[[], object]] = [
        lambda: write(journal, "d", "garage doors close at ten", scope="global"),
        lambda: write(journal, "a", "parking code for the garage is 4711 tea", scope="global"),
        lambda: delete(journal, "b"),
        lambda: write(journal, "b", "tea tea tea", scope="global", tags=("parking",)),
        lambda: delete(journal, "nobody"),
        lambda: write(journal, "e", "", scope="global"),
    ]
    for step in steps:
        step()
        fold(journal, views)
        assert_same_as_a_fresh_view(kept, views)
        assert kept.statistics.generation == changed_at(views)
    # Expiry changes no figure (the expired item stays in the index): still the same scores.
    write(journal, "f", "parking for visitors", scope="global", expires_at_ms=100)
    fold(journal, views)
    for now in (1, 60, 99, 100, 10_000):
        assert_same_as_a_fresh_view(kept, views, now_ms=now)
    kept.close()


def test_a_kept_figure_is_used_only_at_its_generation(journal: Journal, views: Path) -> None:
    write(journal, "a", "parking code for the garage", scope="global")
    write(journal, "b", "green tea", scope="global")
    fold(journal, views)
    kept = MemoryView(views)

    def lexical_of_a() -> float:
        (hit,) = [h for h in kept.search("parking tea", now_ms=1) if h.item.item_id == "a"]
        return hit.lexical

    before = lexical_of_a()
    figures = kept.statistics._figures
    assert figures is not None and figures.counts == {"parking": 1, "tea": 1}
    figures.counts["parking"] = 2  # a wrong figure: the search uses it at this generation
    assert lexical_of_a() != before
    write(journal, "c", "something else entirely", scope="global")
    fold(journal, views)
    assert_same_as_a_fresh_view(kept, views)
    assert kept.statistics._figures is not figures
    kept.close()


def test_searches_on_many_threads_while_the_fold_goes_on_end_as_a_fresh_view(
    journal: Journal, views: Path
) -> None:
    """Each search reads its generation in its own snapshot; threads that search while folds
    move it never fail, and once the folds stop the kept figures are the index's."""
    write(journal, "a", "parking code for the garage", scope="global")
    fold(journal, views)
    kept = MemoryView(views)
    failures: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        try:
            while not done.is_set():
                for q in QUERIES:
                    kept.search(q, k=3, principal="user:alice", session_id="S1", now_ms=1)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        for n in range(12):
            write(journal, f"w{n}", f"garage tea parking {n}", scope="global")
            if n % 3 == 0:
                delete(journal, f"w{n}")
            fold(journal, views)
    finally:
        done.set()
        for t in threads:
            t.join()
    assert failures == []
    assert_same_as_a_fresh_view(kept, views)
    kept.close()


def test_kept_figures_are_counted_once_per_generation(journal: Journal, views: Path) -> None:
    write(journal, "a", "parking code for the garage", scope="global")
    fold(journal, views)
    kept = MemoryView(views)
    kept.search("parking garage", now_ms=1)
    assert kept.statistics.counted == 3  # the totals and two words
    kept.search("garage parking", now_ms=1)
    kept.search("parking", now_ms=1)
    assert kept.statistics.counted == 3
    write(journal, "b", "parking for visitors", scope="global")
    fold(journal, views)
    kept.search("parking", now_ms=1)
    assert kept.statistics.counted == 5
    kept.close()


def test_the_cache_keeps_at_most_its_bound_of_words(journal: Journal, views: Path) -> None:
    write(journal, "a", "alpha beta gamma delta", scope="global")
    fold(journal, views)
    kept = MemoryView(views)
    kept.statistics = StatisticsCache(max_terms=2)
    reference = MemoryView(views)
    for query in ["alpha beta", "gamma delta", "alpha gamma delta", "beta"]:
        assert kept.search(query, now_ms=1) == reference.search(query, now_ms=1)
        figures = kept.statistics._figures
        assert figures is not None and len(figures.counts) <= 2
    kept.close()
    reference.close()


def test_a_search_dropping_the_kept_words_meanwhile_does_not_break_another(
    journal: Journal, views: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two searches at one generation: while one counts its missing words in FTS5 (the GIL
    released), the other passes the bound and drops the kept words; the first still has every
    figure it saw kept, and scores as a fresh view."""
    write(journal, "a", "alpha beta gamma delta epsilon zeta", scope="global")
    fold(journal, views)
    kept = MemoryView(views)
    kept.statistics = StatisticsCache(max_terms=2)
    reference = MemoryView(views)
    assert kept.search("alpha beta", now_ms=1)  # alpha, beta kept
    real = memory_bm25.document_counts
    interleaved: list[list[MemoryHit]] = []
    other = threading.Event()

    def counting_while_another_searches(conn: apsw.Connection, terms: list[str]) -> list[int]:
        counted = real(conn, terms)
        if not other.is_set():
            other.set()
            interleaved.append(kept.search("delta epsilon zeta", now_ms=1))  # past the bound
        return counted

    monkeypatch.setattr(memory_bm25, "document_counts", counting_while_another_searches)
    assert kept.search("alpha gamma", now_ms=1) == reference.search("alpha gamma", now_ms=1)
    assert interleaved == [reference.search("delta epsilon zeta", now_ms=1)]
    kept.close()
    reference.close()


# --- lexical candidates ----------------------------------------------------------------------


def filtered_walk(
    conn: apsw.Connection, match: str, seen: list[str], now: int, pool: int
) -> list[int]:
    """The lexical candidates by definition: FTS5's walk joined with who sees what."""
    wt, wg = memory_bm25.WEIGHTS
    marks = ",".join("?" * len(seen))
    return [
        int(r)
        for (r,) in conn.execute(
            "SELECT f.rowid FROM memory_fts f JOIN memory_items i ON i.row = f.rowid"
            f" WHERE memory_fts MATCH ? AND i.audience IN ({marks})"
            " AND (i.expires_at_ms IS NULL OR i.expires_at_ms > ?)"
            f" ORDER BY bm25(memory_fts, {wt}, {wg}), f.rowid LIMIT ?",
            (match, *seen, now, pool),
        )
    ]


def test_lexical_candidates_are_the_filtered_walks_whoever_asks(
    journal: Journal, views: Path
) -> None:
    """Most items are bob's, a few global, one alice's, some expired: for alice the best rows
    whoever sees them hold too few of hers (the filtered walk is made), for bob enough."""
    rng = random.Random(3)
    words = ["lamp", "desk", "chair", "window", "door", "floor", "wall"]
    for n in range(160):
        roll = rng.random()
        fields: dict[str, Any] = {"scope": "principal", "principal": "user:bob"}
        if roll < 0.15:
            fields = {"scope": "global"}
        elif roll < 0.2:
            fields = {"scope": "session", "session_id": "S1"}
        if rng.random() < 0.1:
            fields["expires_at_ms"] = 500
        text = " ".join(rng.choices(words, k=rng.randint(1, 8)))
        write(journal, f"i{n:03d}", text, **fields)
    write(journal, "mine", "lamp", scope="principal", principal="user:alice")
    fold(journal, views)
    v = MemoryView(views)
    with v._read() as conn:
        for principal, session in [("user:alice", None), ("user:bob", "S1"), (None, "S1")]:
            seen = audiences(principal, session)
            for query in ["lamp", "desk chair", "window door floor wall", "lamp desk"]:
                match = fts_match(fts_terms(query))
                for now in (1, 1_000):
                    for pool in (1, 5, 20, 200):
                        expected = filtered_walk(conn, match, seen, now, pool)
                        found = v._lexical_top(conn, match, seen, now, pool)
                        assert found == expected, (principal, query, now, pool)
    v.close()


def filtered_scan(
    conn: apsw.Connection, vector: bytes, seen: list[str], now: int, pool: int
) -> list[int]:
    """The vector candidates as the KNN filtered on the index's metadata finds them."""
    marks = ",".join("?" * len(seen))
    return [
        int(r)
        for (r,) in conn.execute(
            "SELECT item_row FROM memory_vec WHERE embedding MATCH ? AND k = ?"
            f" AND audience_key IN ({marks}) AND expires_at_ms > ?",
            (vector, pool, *(audience_key(a) for a in seen), min(now, NO_EXPIRY - 1)),
        )
    ]


def test_vector_candidates_are_the_filtered_scans_whoever_asks(
    journal: Journal, views: Path
) -> None:
    """As for the lexical candidates: for alice the nearest rows whoever sees them hold too
    few of hers (the filtered scan is made), for bob enough; the same rows either way. Each
    text holds a word of its own, so no two items are at the same distance. A pool past half
    of vec0's largest k widens only up to it."""
    rng = random.Random(5)
    words = ["lamp", "desk", "chair", "window", "door", "floor", "wall"]
    for n in range(160):
        roll = rng.random()
        fields: dict[str, Any] = {"scope": "principal", "principal": "user:bob"}
        if roll < 0.15:
            fields = {"scope": "global"}
        elif roll < 0.2:
            fields = {"scope": "session", "session_id": "S1"}
        if rng.random() < 0.1:
            fields["expires_at_ms"] = 500
        text = " ".join([*rng.choices(words, k=rng.randint(1, 8)), f"item{n}"])
        write(journal, f"i{n:03d}", text, **fields)
    write(journal, "mine", "lamp mine", scope="principal", principal="user:alice")
    delete(journal, "i007")
    fold(journal, views)
    v = MemoryView(views)
    with v._read() as conn:
        for principal, session in [("user:alice", None), ("user:bob", "S1"), (None, "S1")]:
            seen = audiences(principal, session)
            for query in ["lamp", "desk chair", "window door floor wall", "lamp desk"]:
                qvec = v.embedder.embed_query(query)
                for now in (1, 1_000):
                    for pool in (1, 5, 20, 200, 4096):  # 4096: vec0's largest k
                        expected = filtered_scan(conn, pack_vector(qvec), seen, now, pool)
                        found = v._vector_top(conn, qvec, seen, now, pool)
                        assert found == expected, (principal, query, now, pool)
    v.close()
