"""The search's BM25, computed from candidate texts, equals BM25 computed inside FTS5 from its
own phrase locations and statistics, row by row: same tokenizer, same counts (also for words
FTS5 splits in two, stems, case, diacritics and tags), same lengths."""

from __future__ import annotations

import random
from typing import Any, cast

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.memory import bm25 as memory_bm25
from projections.memory.bm25 import K1, WEIGHTS, B, Scorer, statistics, tokenize_spec
from projections.memory.search import fts_match, fts_terms

TEXTS = [
    "Don't stop the running journal; it runs and RUNS",
    "Café résumé naïve coöperate",
    "the staging database is db-2, not db-3",
    "approvals wait for an approver who approves",
    "run run run run run",
    "a b c",
    "tokens, tokens; token! tokenised",
]
QUERY_WORDS = " ".join([*TEXTS, "zzz", "Qu'est-ce"]).split()
TAGS = [("ops", "journal"), (), ("db",), ("approval", "run"), (), ("x y",), ("tokens",)]


def reference(api: apsw.FTS5ExtensionApi, *idfs: Any) -> float:
    """BM25 of FTS5's current row from its phrase locations (what the search computed in FTS5
    before it computed from texts)."""
    rows = api.row_count
    mean = api.column_total_size(-1) / rows if rows else 0.0
    norm = K1 * (1.0 - B + B * api.column_size(-1) / mean) if mean > 0 else K1
    score = 0.0
    for index, idf in enumerate(idfs):
        f = sum(w * len(at) for w, at in zip(WEIGHTS, api.phrase_locations(index), strict=False))
        if f > 0:
            score += float(idf) * f * (K1 + 1.0) / (f + norm)
    return score


@pytest.fixture(scope="module")
def conn() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    db.execute(
        "CREATE VIRTUAL TABLE memory_fts USING fts5(text, tags, content='',"
        f" contentless_delete=1, tokenize='{tokenize_spec()}')"
    )
    rng = random.Random(5)
    words = " ".join(TEXTS).split()
    rows = [(t, " ".join(g)) for t, g in zip(TEXTS, TAGS, strict=True)]
    rows += [(" ".join(rng.choices(words, k=rng.randint(1, 20))), "") for _ in range(200)]
    for rowid, (text, tags) in enumerate(rows, 1):
        db.execute("INSERT INTO memory_fts(rowid, text, tags) VALUES (?,?,?)", (rowid, text, tags))
    db.execute("CREATE TABLE texts(rowid INTEGER PRIMARY KEY, text TEXT, tags TEXT)")
    db.executemany(
        "INSERT INTO texts VALUES (?,?,?)", [(i, t, g) for i, (t, g) in enumerate(rows, 1)]
    )
    memory_bm25.register(db)
    db.register_fts5_function("reference_bm25", reference)
    return db


def scores(conn: apsw.Connection, query: str) -> tuple[dict[int, float], dict[int, float]]:
    terms = fts_terms(query)
    match = fts_match(terms)
    idfs, mean, _ = statistics(conn, match, terms)
    marks = ",".join("?" * len(idfs))
    inside = {
        int(r): float(v)
        for r, v in conn.execute(
            f"SELECT rowid, reference_bm25(memory_fts, {marks}) FROM memory_fts"
            " WHERE memory_fts MATCH ?",
            (*idfs, match),
        )
    }
    scorer = Scorer(conn, terms, idfs, mean)
    texts = cast(
        list[tuple[int, str, str]], conn.execute("SELECT rowid, text, tags FROM texts").fetchall()
    )
    outside = {int(r): scorer.score(t, tuple(g.split())) for r, t, g in texts}
    return inside, outside


@pytest.mark.parametrize(
    "query", ["don't stop", "running", "CAFE resume", "db-2", "approve tokens", "run journal ops"]
)
def test_scores_from_texts_equal_fts5s_own(conn: apsw.Connection, query: str) -> None:
    inside, outside = scores(conn, query)
    assert inside, "the query matches some rows"
    for row, value in outside.items():
        assert value == pytest.approx(inside.get(row, 0.0), abs=1e-12), row


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(QUERY_WORDS), min_size=1, max_size=6))
def test_any_query_scores_the_same(conn: apsw.Connection, words: list[str]) -> None:
    query = " ".join(words)
    if not fts_terms(query):
        return
    inside, outside = scores(conn, query)
    for row, value in outside.items():
        assert value == pytest.approx(inside.get(row, 0.0), abs=1e-12), (query, row)
