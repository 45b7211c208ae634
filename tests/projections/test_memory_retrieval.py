"""Retrieval quality of the memory search on a labelled corpus (memory_corpus/corpus.json):
hit@k and MRR for every embedder installed, by kind of query, printed (``pytest -s``) for
docs/benchmarks.md, with a floor for the hashing embedder and, where the ``embeddings`` extra is
installed, proof that the real model beats it.

Every item is written as a ``memory.item_written`` event through the real journal and folded by
the real projector; the searches go through :class:`projections.MemoryView`, as a run's would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from actors.config import ActorsConfig
from actors.runs.context import injected_by
from events import Journal
from events.catalog import MemoryItemWritten
from projections import (
    Embedder,
    EmbedderUnavailable,
    MemoryView,
    Projector,
    SearchWeights,
    all_projections,
    make_embedder,
)

CORPUS = json.loads((Path(__file__).parent / "memory_corpus" / "corpus.json").read_text())
KINDS = ("exact", "lexical", "paraphrase")
DEPTH = 10
"""Ranks beyond this count as a miss for MRR."""


class Figures(NamedTuple):
    queries: int
    hit1: float
    hit3: float
    hit5: float
    mrr: float


def ranks_of(view: MemoryView) -> list[int | None]:
    """For each of the corpus's queries, in order, the rank of its first relevant item (None
    beyond :data:`DEPTH`): each query searched once, however many figures it counts in."""
    ranks: list[int | None] = []
    for query in CORPUS["queries"]:
        found = [h.item.item_id for h in view.search(query["q"], k=DEPTH)]
        ranks.append(next((i + 1 for i, x in enumerate(found) if x in query["relevant"]), None))
    return ranks


def measure(all_ranks: list[int | None], kind: str | None = None) -> Figures:
    """hit@1/3/5 (a relevant item in the top k) and MRR (mean of 1/rank of the first relevant
    item) over the corpus's queries of ``kind`` (all when ``None``)."""
    ranks = [
        r for q, r in zip(CORPUS["queries"], all_ranks, strict=True) if kind in (None, q["kind"])
    ]
    n = len(ranks)
    return Figures(
        queries=n,
        hit1=round(sum(r is not None and r <= 1 for r in ranks) / n, 3),
        hit3=round(sum(r is not None and r <= 3 for r in ranks) / n, 3),
        hit5=round(sum(r is not None and r <= 5 for r in ranks) / n, 3),
        mrr=round(sum(1 / r for r in ranks if r is not None) / n, 3),
    )


def build(root: Path, embedder: Embedder) -> Path:
    """The corpus written through the journal and folded into views.db; returns its path."""
    root.mkdir(parents=True)
    with Journal(root / "journal.db", node_key=None) as journal:
        for item in CORPUS["items"]:
            event = MemoryItemWritten(
                item_id=item["id"], text=item["text"], tags=tuple(item["tags"]), scope="global"
            )
            journal.append(f"memory/{item['id']}", [event], expected_seq=0)
        projector = Projector(journal, root / "views.db", all_projections(embedder))
        try:
            projector.catch_up()
        finally:
            projector.close()
    return root / "views.db"


def report(name: str, view: MemoryView) -> dict[str, Figures]:
    ranks = ranks_of(view)
    figures = {kind: measure(ranks, kind) for kind in KINDS}
    figures["all"] = measure(ranks)
    print(f"\n{name}: queries  hit@1  hit@3  hit@5  MRR")
    for kind, f in figures.items():
        print(
            f"  {kind:<10} {f.queries:>4}   {f.hit1:.3f}  {f.hit3:.3f}  {f.hit5:.3f}  {f.mrr:.3f}"
        )
    return figures


@pytest.fixture(scope="session")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Embedder, Path]]:
    """The corpus built once per session for each embedder installed: its views.db."""
    out: dict[str, tuple[Embedder, Path]] = {}
    root = tmp_path_factory.mktemp("retrieval")
    for name in ("hashing", "e5-small"):
        try:
            embedder = make_embedder(name)
        except EmbedderUnavailable:
            continue
        out[name] = (embedder, build(root / name, embedder))
    return out


@pytest.fixture(scope="module")
def results(corpora: dict[str, tuple[Embedder, Path]]) -> dict[str, dict[str, Figures]]:
    """Figures per embedder installed, plus ``fts5-only`` (the hashing index, words only)."""
    out: dict[str, dict[str, Figures]] = {}
    for name, (embedder, views) in corpora.items():
        view = MemoryView(views, embedder)
        out[name] = report(name, view)
        if name == "hashing":
            words = MemoryView(views, embedder, weights=SearchWeights(lexical=1, vector=0))
            out["fts5-only"] = report("fts5-only (bm25, no vectors)", words)
            words.close()
        view.close()
    return out


def test_the_corpus_is_labelled_consistently() -> None:
    items = {item["id"] for item in CORPUS["items"]}
    assert len(items) == len(CORPUS["items"]) >= 60
    queries: list[dict[str, Any]] = CORPUS["queries"]
    assert len(queries) >= 30
    assert {q["kind"] for q in queries} == set(KINDS)
    assert sum(q["kind"] == "paraphrase" for q in queries) >= 15
    for query in queries:
        assert query["relevant"] and set(query["relevant"]) <= items, query


def test_the_hashing_embedder_stays_above_its_floor(
    results: dict[str, dict[str, Figures]],
) -> None:
    hashing = results["hashing"]
    assert hashing["exact"].hit1 == 1.0
    assert hashing["lexical"].hit1 >= 0.9 and hashing["lexical"].hit3 == 1.0
    assert hashing["all"].hit5 >= 0.65
    assert hashing["all"].mrr >= 0.58
    # Words cannot find a paraphrase: this is what a real model is for.
    assert hashing["paraphrase"].hit5 <= 0.5


def test_the_real_model_beats_the_hashing_embedder(
    results: dict[str, dict[str, Figures]],
) -> None:
    if "e5-small" not in results:
        pytest.skip("e5-small is not installed: pip install 'reel[embeddings]'")
    e5, hashing = results["e5-small"], results["hashing"]
    assert e5["all"].mrr > hashing["all"].mrr + 0.2
    assert e5["paraphrase"].hit5 > hashing["paraphrase"].hit5 + 0.4
    assert e5["exact"].hit1 == 1.0 and e5["lexical"].hit1 >= 0.9


CHATTY = json.loads((Path(__file__).parent / "memory_corpus" / "chatty.json").read_text())


def injection_recall(
    view: MemoryView, messages: list[tuple[str, set[str]]], min_evidence: float
) -> tuple[float, int]:
    """With a run's gate (the top ``inject_k`` hits through :func:`actors.runs.context.injected_by`,
    the node's defaults): the share of messages that inject a relevant item, and how many
    irrelevant items are injected in all."""
    cfg = ActorsConfig()
    found = wrong = 0
    for message, relevant in messages:
        injected = [
            h.item.item_id
            for h in view.search(message, cfg.memory_inject_k)
            if injected_by(h.final, h.evidence, h.terms, cfg.memory_min_score, min_evidence)
        ]
        found += any(i in relevant for i in injected)
        wrong += sum(i not in relevant for i in injected)
    return found / len(messages), wrong


def test_a_question_inside_a_chatty_message_still_injects_its_answer(
    corpora: dict[str, tuple[Embedder, Path]],
) -> None:
    """The final score is a share of the whole message, so greetings around a question sink
    it under ``min_score``; the words' evidence brings a relevant item back, and never for a
    message about something else (docs/context.md, "Memory auto-injection")."""
    embedder, views = corpora["hashing"]
    view = MemoryView(views, embedder)
    try:
        terse = [(q["q"], set(q["relevant"])) for q in CORPUS["queries"]]
        chatty = [
            (template.format(q=q.rstrip("?")), relevant)
            for q, relevant in terse
            for template in CHATTY["templates"]
        ]
        unrelated: list[tuple[str, set[str]]] = [(m, set()) for m in CHATTY["unrelated"]]
        on = ActorsConfig().memory_min_evidence
        figures = {
            name: (injection_recall(view, msgs, 0.0), injection_recall(view, msgs, on))
            for name, msgs in (("terse", terse), ("chatty", chatty), ("unrelated", unrelated))
        }
        print("\ninjection (hashing): recall, wrong items  score only | with evidence")
        for name, (off, with_words) in figures.items():
            print(f"  {name:<10} {off[0]:.3f} {off[1]:>3} | {with_words[0]:.3f} {with_words[1]:>3}")
        (t_off, t_on), (c_off, c_on), (u_off, u_on) = figures.values()
        assert t_on[0] == t_off[0]  # the bare questions lose nothing
        assert c_off[0] < 0.1 and c_on[0] >= 0.3, figures["chatty"]
        assert c_on[1] <= 3
        assert u_off == u_on == (0.0, 0)
    finally:
        view.close()
