"""The memory view: folding ``memory.*`` events from the real journal into views.db (FTS5 and
sqlite-vec), rebuilding it (``reel replay``, an embedder switch), and the hybrid search over it:
scores, scopes, deletion, expiry, hostile FTS5 syntax, and secrets that never reach an index."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import MARKER, Journal, JournalReader
from projections import (
    Embedder,
    EmbedderUnavailable,
    HashingEmbedder,
    MemoryHit,
    MemoryView,
    SearchWeights,
    all_projections,
    compare,
    make_embedder,
    rebuild,
    replay,
)
from projections.memory import search as memory_search_module
from projections.memory import view as memory_module
from projections.memory.view import MemoryProjection, load_vec
from tests.projections.memory_kit import delete, fold, write

SECRET = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
DAY = 86_400_000


def view(path: Path, embedder: Embedder | None = None, **kwargs: object) -> MemoryView:
    return MemoryView(path, embedder, **kwargs)  # type: ignore[arg-type]


def ids(hits: Sequence[MemoryHit]) -> list[str]:
    return [h.item.item_id for h in hits]


# --- folding and search --------------------------------------------------------------------------


def test_an_item_written_through_the_journal_is_found_with_its_score_breakdown(
    journal: Journal, views: Path
) -> None:
    write(journal, "m1", "Production deploys happen on Tuesdays", tags=("process",), scope="global")
    write(journal, "m2", "Alice drinks green tea without sugar", scope="global")
    fold(journal, views)
    v = view(views)
    hits = v.search("when are deploys")
    assert ids(hits) == ["m1"]
    hit = hits[0]
    assert 0 < hit.lexical <= 1 and 0 < hit.vector <= 1 and 0.99 < hit.recency <= 1
    w = v.weights
    assert hit.final == pytest.approx(
        w.lexical * hit.lexical + w.vector * hit.vector + w.recency * hit.recency, abs=1e-5
    )
    item = hit.item
    assert (item.text, item.tags, item.scope, item.source) == (
        "Production deploys happen on Tuesdays",
        ("process",),
        "global",
        "manual",
    )
    assert item.written_by == "operator" and item.created_at_ms == item.updated_at_ms
    assert v.get("m1") == item and v.get("nope") is None
    (partial,) = v.search("deploys on fridays")  # one of two words: a part of the query
    assert 0 < partial.lexical < hit.lexical
    v.close()


def test_an_empty_index_an_empty_query_and_k_zero_give_nothing(
    journal: Journal, views: Path
) -> None:
    fold(journal, views)
    v = view(views)
    assert v.search("anything at all") == []
    write(journal, "m1", "something to find", scope="global")
    fold(journal, views)
    assert v.search("") == [] and v.search("  ?! ") == [] and v.search("something", k=0) == []
    assert ids(v.search("something")) == ["m1"]
    v.close()


def test_a_search_of_an_empty_memory_embeds_nothing(
    journal: Journal, views: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run searches memory before its first turn, and most nodes have none: the query
    is embedded (and matched) only once an item exists."""
    fold(journal, views)
    v = view(views)
    embedded: list[str] = []
    embed = v.embedder.embed_query

    def counted(text: str) -> list[float]:
        embedded.append(text)
        return embed(text)

    monkeypatch.setattr(v.embedder, "embed_query", counted)
    assert v.search("anything at all") == [] and embedded == []
    write(journal, "m1", "something to find", scope="global")
    fold(journal, views)
    assert ids(v.search("something")) == ["m1"] and embedded == ["something"]
    v.close()


def test_recency_halves_every_half_life_and_ranks_equal_matches(
    journal: Journal, views: Path
) -> None:
    write(journal, "old", "the build server is called hopper", scope="global")
    write(journal, "new", "the build server is called hopper", scope="global")
    fold(journal, views)
    v = view(views, weights=SearchWeights(half_life_ms=DAY))
    written = v.get("old")
    assert written is not None
    hits = v.search("build server", now_ms=written.updated_at_ms + DAY)
    assert ids(hits)[0] == "new" or hits[0].recency == hits[1].recency
    assert hits[1].recency == pytest.approx(0.5, abs=1e-3)
    later = v.search("build server", now_ms=written.updated_at_ms + 3 * DAY)
    assert later[1].recency == pytest.approx(0.125, abs=1e-3)
    v.close()


def test_the_vector_index_finds_what_words_miss(journal: Journal, views: Path) -> None:
    """A typo shares no FTS5 term with the item but most character n-grams: the hashing
    embedder's vector finds it, with a lexical score of 0."""
    write(journal, "m1", "Password resets are handled by the helpdesk", scope="global")
    fold(journal, views)
    v = view(views)
    (hit,) = v.search("pasword helpdsk")
    assert hit.item.item_id == "m1" and hit.lexical == 0 and hit.vector > 0
    v.close()


def test_a_view_built_by_another_embedder_ranks_by_words_only(
    journal: Journal, views: Path
) -> None:
    write(journal, "m1", "Password resets are handled by the helpdesk", scope="global")
    fold(journal, views, HashingEmbedder(dim=64))
    v = view(views, HashingEmbedder(dim=128))
    assert v.index_fingerprint() == "hashing:v1:64"
    (hit,) = v.search("password resets")
    assert hit.vector == 0 and hit.lexical > 0
    assert v.search("pasword helpdsk") == []
    v.close()


# --- rewrites, deletion, expiry -------------------------------------------------------------------


def test_writing_an_item_again_replaces_it_and_keeps_its_creation_time(
    journal: Journal, views: Path
) -> None:
    write(journal, "m1", "the office is in Lisbon", scope="global")
    fold(journal, views)
    v = view(views)
    first = v.get("m1")
    write(journal, "m1", "the office moved to Porto", scope="global", tags=("office",))
    fold(journal, views)
    assert v.search("Lisbon") == [] and v.search("Lisbn") == []
    (hit,) = v.search("Porto office")
    assert hit.item.text == "the office moved to Porto" and hit.item.tags == ("office",)
    assert first is not None and hit.item.created_at_ms == first.created_at_ms
    assert hit.item.updated_at_ms >= first.updated_at_ms
    v.close()


def test_a_deleted_item_is_never_returned_and_a_new_write_brings_it_back(
    journal: Journal, views: Path
) -> None:
    write(journal, "m1", "the wifi network is called lighthouse", scope="global")
    write(journal, "m2", "the guest network is called harbour", scope="global")
    fold(journal, views)
    delete(journal, "m1", reason="wrong", principal="user:alice")
    delete(journal, "unknown", reason="never written")
    fold(journal, views)
    v = view(views)
    assert ids(v.search("lighthouse network")) == ["m2"]
    assert ids(v.search("lighthuose")) == []  # not through the vector index either
    assert v.get("m1") is None
    gone = v.get("m1", include_deleted=True)
    assert gone is not None and (gone.deleted_by, gone.deleted_reason) == ("user:alice", "wrong")
    assert [i.item_id for i in v.items(everyone=True)] == ["m2"]
    write(journal, "m1", "the wifi network is called lighthouse", scope="global")
    fold(journal, views)
    assert ids(v.search("lighthouse")) == ["m1"]
    v.close()


def test_an_expired_item_is_never_returned(journal: Journal, views: Path) -> None:
    write(journal, "soon", "parking code for the garage", scope="global", expires_at_ms=10_000)
    write(journal, "kept", "parking rules for the garage", scope="global")
    fold(journal, views)
    v = view(views)
    assert set(ids(v.search("parking garage", now_ms=9_999))) == {"soon", "kept"}
    assert ids(v.search("parking garage", now_ms=10_000)) == ["kept"]
    assert ids(v.search("parkng garag", now_ms=10_000)) == ["kept"]  # the vector path too
    assert v.get("soon", now_ms=10_000) is None
    assert v.get("soon", now_ms=10_000, include_expired=True) is not None
    assert [i.item_id for i in v.items(everyone=True, now_ms=10_000)] == ["kept"]
    v.close()


# --- scopes ---------------------------------------------------------------------------------------


@pytest.fixture
def scoped(journal: Journal, views: Path) -> MemoryView:
    """One item per audience, all about lighthouses."""
    write(journal, "g", "lighthouse keeper notes (global)", scope="global")
    write(
        journal, "a", "lighthouse keeper notes (alice)", scope="principal", principal="user:alice"
    )
    write(journal, "b", "lighthouse keeper notes (bob)", scope="principal", principal="user:bob")
    write(journal, "s1", "lighthouse keeper notes (s1)", scope="session", session_id="S1")
    write(journal, "s2", "lighthouse keeper notes (s2)", scope="session", session_id="S2")
    write(
        journal, "w", "lighthouse keeper notes (writer)", scope="principal", principal="user:carol"
    )
    fold(journal, views)
    return view(views)


@pytest.mark.parametrize("query", ["lighthouse keeper", "lighthuose keepr"], ids=["fts", "vec"])
def test_search_sees_global_items_and_the_callers_principal_and_session(
    scoped: MemoryView, query: str
) -> None:
    def seen(**kwargs: object) -> set[str]:
        return set(ids(scoped.search(query, k=10, **kwargs)))  # type: ignore[arg-type]

    assert seen(principal="user:alice", session_id="S1") == {"g", "a", "s1"}
    assert seen(principal="user:bob") == {"g", "b"}
    assert seen(session_id="S2") == {"g", "s2"}
    assert seen() == {"g"}
    assert seen(principal="user:alice", session_id="S1", scopes={"global"}) == {"g"}
    assert seen(principal="user:alice", session_id="S1", scopes={"session"}) == {"s1"}
    assert seen(principal="user:alice", scopes=()) == set()


def test_audience_keys_that_collide_still_show_no_one_anothers_items(
    journal: Journal, views: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector index filters by a 63-bit key of the audience; were every key the same, the
    KNN would propose everyone's items, and the search must still return only the caller's."""
    monkeypatch.setattr(memory_module, "audience_key", lambda audience: 7)
    monkeypatch.setattr(memory_search_module, "audience_key", lambda audience: 7)
    write(journal, "a", "lighthouse keeper notes", scope="principal", principal="user:alice")
    write(journal, "b", "lighthouse keeper notes", scope="principal", principal="user:bob")
    write(journal, "s", "lighthouse keeper notes", scope="session", session_id="S1")
    fold(journal, views)
    typo = "lighthuose keepr"  # found by the vectors only
    assert ids(view(views).search(typo, k=10, principal="user:bob")) == ["b"]
    assert ids(view(views).search(typo, k=10, session_id="S1")) == ["s"]
    assert ids(view(views).search(typo, k=10)) == []


def test_an_items_owner_defaults_to_its_writer(journal: Journal, views: Path) -> None:
    write(journal, "mine", "my locker number is 42", scope="principal", principal="user:dora")
    write(journal, "own", "my bike is blue", scope="principal")  # owner: the writer
    fold(journal, views)
    v = view(views)
    own = v.get("own")
    assert own is not None and own.principal == "operator" and own.visible_to("operator", None)
    assert not own.visible_to("user:dora", None)
    assert [i.item_id for i in v.items(principal="operator")] == ["own"]
    assert [i.item_id for i in v.items(principal="user:dora")] == ["mine"]
    assert [i.item_id for i in v.items(everyone=True, scopes={"principal"})] == ["mine", "own"]
    v.close()


# --- hostile queries ------------------------------------------------------------------------------

HOSTILE = [
    '"',
    '"unbalanced quote',
    "deploy*",
    "*",
    "NEAR(deploy tuesday)",
    "deploy NEAR tuesday",
    "-deploy",
    "deploy - tuesday",
    "(deploy",
    "deploy)",
    "AND",
    "OR OR NOT",
    "text:deploy",
    "{text tags}: deploy",
    "^deploy",
    "deploy + tuesday",
    "'; DROP TABLE memory_items; --",
    "\x00deploy",
    "déploy 🚀 tüesday",
    "deploy " * 2000,
]


@pytest.mark.parametrize("query", HOSTILE)
def test_fts5_syntax_in_a_query_is_plain_text(journal: Journal, views: Path, query: str) -> None:
    write(journal, "m1", "Production deploys happen on Tuesdays", scope="global")
    fold(journal, views)
    v = view(views)
    hits = v.search(query)
    if "deploy" in query.lower() or "tuesday" in query.lower():
        assert ids(hits) == ["m1"], query
    assert v.get("m1") is not None  # and nothing was dropped
    v.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=200))
def test_no_query_raises(views_with_one_item: MemoryView, query: str) -> None:
    for hit in views_with_one_item.search(query, k=3):
        assert 0 <= hit.final <= 1


@pytest.fixture
def views_with_one_item(journal: Journal, views: Path) -> Iterator[MemoryView]:
    write(
        journal, "m1", "Production deploys happen on Tuesdays (and NEAR-misses *)", scope="global"
    )
    fold(journal, views)
    v = view(views)
    yield v
    v.close()


# --- secrets --------------------------------------------------------------------------------------


def test_a_secret_in_memory_text_is_redacted_before_any_index_sees_it(
    journal: Journal, views: Path, data_dir: Path
) -> None:
    write(
        journal,
        "m1",
        f"the deploy token is {SECRET} keep it safe",
        tags=(f"token {SECRET}",),
        scope="global",
    )
    fold(journal, views)
    v = view(views)
    item = v.get("m1")
    assert item is not None and SECRET not in item.text and MARKER in item.text
    assert all(SECRET not in tag for tag in item.tags)
    assert all(SECRET not in h.item.text for h in v.search(SECRET))
    v.close()
    conn = apsw.Connection(str(views), flags=apsw.SQLITE_OPEN_READONLY)
    conn.execute("CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, memory_fts, 'row')")
    terms = {str(t) for (t,) in conn.execute("SELECT term FROM temp.terms")}
    conn.close()
    assert {"deploi", "token", "safe"} <= terms  # Porter stems
    assert not any("r2d2c3po" in t for t in terms), terms
    files = [f for f in data_dir.iterdir() if f.is_file()]
    assert {"journal.db", "views.db"} <= {f.name for f in files}
    for path in files:  # the databases and their WAL files
        assert SECRET.encode() not in path.read_bytes(), path.name


# --- rebuilding -----------------------------------------------------------------------------------


def workload(journal: Journal) -> None:
    """Writes, a rewrite, deletions, an expiry and every scope, some in one projector batch."""
    write(journal, "a", "the staging database runs PostgreSQL 15", scope="global")
    write(journal, "b", "alice prefers dark mode", scope="principal", principal="user:alice")
    write(journal, "c", "session notes: the demo is at noon", scope="session", session_id="S1")
    write(journal, "d", "temporary door code 4711", scope="global", expires_at_ms=5_000)
    write(journal, "a", "the staging database runs PostgreSQL 16", scope="global")
    write(journal, "e", "written then deleted at once", scope="global")
    delete(journal, "e")
    write(journal, "f", "bob likes espresso", scope="principal", principal="user:bob")
    delete(journal, "f", reason="asked to forget")
    write(journal, "g", "", scope="global")  # nothing to embed


def test_views_rebuilt_from_the_journal_are_identical_and_search_the_same(
    journal: Journal, data_dir: Path
) -> None:
    workload(journal)
    live = data_dir / "views.db"
    fold(journal, live, batch=3)  # batch boundaries fall between writes and deletes
    scratch = data_dir / "replayed.db"
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        report = replay(reader, live, scratch)
        assert report.identical, report.differences
        assert report.events == journal.head().position
    finally:
        reader.close()
    queries = ["staging database", "dark mode", "demo noon", "door code", "espresso", "x"]
    a, b = view(live), view(scratch)
    for q in queries:
        assert a.search(q, k=5, principal="user:alice", session_id="S1", now_ms=1) == b.search(
            q, k=5, principal="user:alice", session_id="S1", now_ms=1
        )
    assert ids(a.search("PostgreSQL", now_ms=1)) == ["a"]
    assert a.search("PostgreSQL", now_ms=1)[0].item.text.endswith("16")
    a.close()
    b.close()


def test_replay_compares_the_vector_index_row_by_row(journal: Journal, data_dir: Path) -> None:
    workload(journal)
    live = data_dir / "views.db"
    fold(journal, live)
    conn = apsw.Connection(str(live))
    load_vec(conn)
    first = conn.execute("SELECT item_row FROM memory_vec ORDER BY item_row LIMIT 1").fetchone()
    assert first is not None
    (row,) = first
    conn.execute(
        "UPDATE memory_vec SET embedding = ? WHERE item_row = ?",
        (bytes(4 * HashingEmbedder().dim), row),
    )
    conn.close()
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        scratch = data_dir / "replayed.db"
        rebuild(reader, scratch)
    finally:
        reader.close()
    differences = compare(live, scratch)
    assert [(d.table, d.key) for d in differences] == [("memory_vec", str(row))]


def test_switching_the_embedder_rebuilds_the_memory_view_from_the_events(
    journal: Journal, data_dir: Path
) -> None:
    workload(journal)
    live = data_dir / "views.db"
    before = fold(journal, live, HashingEmbedder(dim=256))
    small, large = MemoryProjection(HashingEmbedder(dim=64)), MemoryProjection(HashingEmbedder())
    assert small.version != large.version
    after = fold(journal, live, HashingEmbedder(dim=64))
    assert after == before
    conn = apsw.Connection(str(live), flags=apsw.SQLITE_OPEN_READONLY)
    load_vec(conn)
    assert conn.execute("SELECT embedder, fingerprint, dim FROM memory_index").fetchall() == [
        ("hashing", "hashing:v1:64", 64)
    ]
    assert {int(n) for (n,) in conn.execute("SELECT vec_length(embedding) FROM memory_vec")} == {64}
    versions = {
        name: version
        for name, version in conn.execute("SELECT name, version FROM projection_checkpoints")
    }
    conn.close()
    assert versions["memory"] == small.version
    v = view(live, HashingEmbedder(dim=64))
    assert v.index_fingerprint() == "hashing:v1:64"
    hit = v.search("stagng databse", now_ms=1)[0]  # vectors only: built by the new embedder
    assert hit.item.item_id == "a" and hit.vector > 0 and hit.lexical == 0
    v.close()
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        assert replay(reader, live, data_dir / "r.db", embedder=HashingEmbedder(dim=64)).identical
        differs = replay(reader, live, data_dir / "r2.db").differences
    finally:
        reader.close()
    assert {d.table for d in differs} >= {"memory_index", "memory_vec", "projection_checkpoints"}


class FailingOnce:
    """An embedder that fails its first call (a model that crashed mid-batch), then works."""

    def __init__(self) -> None:
        self.inner = HashingEmbedder()
        self.name, self.dim, self.fingerprint = "hashing", self.inner.dim, self.inner.fingerprint
        self.similarity_floor = self.inner.similarity_floor
        self.failed = False

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not self.failed:
            self.failed = True
            raise RuntimeError("model crashed")
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def test_a_batch_that_fails_to_embed_rolls_back_and_is_applied_again(
    journal: Journal, data_dir: Path
) -> None:
    from projections import Projector

    workload(journal)
    live = data_dir / "views.db"
    projector = Projector(journal, live, all_projections(FailingOnce()))
    try:
        with pytest.raises(RuntimeError, match="model crashed"):
            projector.catch_up()
        assert projector.checkpoints()["memory"] == 0
        projector.catch_up()
    finally:
        projector.close()
    scratch = data_dir / "replayed.db"
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        rebuild(reader, scratch)
    finally:
        reader.close()
    assert compare(live, scratch) == []


def test_every_projector_maintains_the_memory_view(journal: Journal, views: Path) -> None:
    assert "memory" in [p.name for p in all_projections()]
    write(journal, "m1", "registered by default", scope="global")
    fold(journal, views, None)
    assert ids(view(views).search("registered")) == ["m1"]


def test_a_real_model_rebuilds_bit_for_bit(journal: Journal, data_dir: Path) -> None:
    """Live views fold items one batch at a time, a replay in chunks of 64: the vectors (compared
    byte for byte by ``reel replay``) must not depend on how texts were batched."""
    try:
        e5 = make_embedder("e5-small")
    except EmbedderUnavailable as exc:
        pytest.skip(f"e5-small is not installed (pip install 'reel[embeddings]'): {exc}")
    workload(journal)
    live = data_dir / "views.db"
    fold(journal, live, e5, batch=1)
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        report = replay(reader, live, data_dir / "replayed.db", embedder=e5)
    finally:
        reader.close()
    assert report.identical, report.differences
