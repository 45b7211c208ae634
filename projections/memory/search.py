"""Reading the memory view: items, and hybrid search blending FTS5 bm25, vector similarity and
recency (the formula and its reasons: docs/memory.md).

For a query ``q`` the search gathers candidates the caller may see (their audience: ``global``,
the caller's principal, the caller's session) that have not expired at ``now``, from two
indexes: the ``pool`` best by bm25 and the ``pool`` nearest by cosine. Every candidate then gets
all three scores, each in ``[0, 1]``:

- ``lexical = min(1, BM25(item) / BM25(ideal))``: Okapi BM25 with FTS5's constants and
  statistics (text weighted 1, tags 0.5), counted from the candidates' texts
  (:mod:`projections.memory.bm25`), over the BM25 of an average-length item holding every query
  word once (the sum of the IDFs): the share of the query's information the item holds, 0 when
  it holds no query word;
- ``vector = clamp((cos - floor) / (1 - floor))``, ``cos`` the cosine of the query's and the
  item's vectors and ``floor`` the embedder's ``similarity_floor`` (below it: unrelated);
- ``recency = 0.5 ** (age / half_life)``, ``age`` the time since the item was last written;

and ``final = w_lexical * lexical + w_vector * vector + w_recency * recency``
(:class:`SearchWeights`, per embedder in :data:`WEIGHTS`; half-life 30 days).
Candidates with neither a lexical nor a vector score are dropped; the ``k`` best by ``final``
are returned. A query is never parsed as FTS5 syntax: its words are quoted one by
one and joined with ``OR``, so quotes, ``*``, ``NEAR``, ``-`` or stray parentheses are plain
text.

The caller decides who is asking (``principal``, ``session_id``); the view only filters by it.
Reads use their own read-only connections (WAL), safe from many threads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import msgspec

from events.catalog import MEMORY_SCOPES, MemoryScope
from projections.memory import bm25 as memory_bm25
from projections.memory.bm25 import phrase
from projections.memory.embedders import Embedder, HashingEmbedder, content_words
from projections.memory.matrix import VectorMatrix
from projections.memory.stats import StatisticsCache
from projections.memory.view import NO_EXPIRY, audience_key, audience_of, load_vec, pack_vector
from projections.pool import PooledReader, ReaderLimits

ALL_SCOPES: frozenset[MemoryScope] = frozenset(MEMORY_SCOPES)
MAX_QUERY_TERMS = 16
"""At most this many distinct words of a query go to FTS5 (the rest still shape its vector)."""
MMAP_BYTES = 1 << 30
"""How much of views.db each read connection memory-maps."""
LEXICAL_WIDEN = 2
"""The lexical and the vector candidates are first looked for among this many times ``pool``
best rows by bm25 or nearest by distance, whoever may see them (:meth:`MemoryView._lexical_top`,
:meth:`MemoryView._vector_top`)."""
VEC_MAX_K = 4096
"""sqlite-vec's largest ``k`` for a KNN query."""
_DAY_MS = 86_400_000


class SearchWeights(msgspec.Struct, frozen=True, kw_only=True):
    """How the three scores blend into ``final`` (see the module docstring)."""

    lexical: float = 0.4
    vector: float = 0.5
    recency: float = 0.1
    half_life_ms: int = 30 * _DAY_MS
    """After this long an item's recency score has halved."""


WEIGHTS: dict[str, SearchWeights] = {
    "hashing": SearchWeights(lexical=0.5, vector=0.4, recency=0.1),
    "e5-small": SearchWeights(lexical=0.2, vector=0.7, recency=0.1),
}
"""The blend for each embedder (by name), measured on the labelled corpus
(tests/projections/memory_corpus; docs/memory.md): the hashing embedder's vectors re-score the
same words bm25 already matched (with inflections and typos), so words lead; a real model's
vectors carry meaning, and a word that a paraphrase shares by chance with another item
("user", "test") must not outvote them, so vectors lead."""


def weights_for(embedder: Embedder) -> SearchWeights:
    """The default blend for ``embedder`` (:data:`WEIGHTS`, else :class:`SearchWeights`)."""
    return WEIGHTS.get(embedder.name, SearchWeights())


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True):
    """One memory item as the view holds it."""

    item_id: str
    text: str
    source: str
    tags: tuple[str, ...]
    scope: str
    principal: str | None
    """Whose item it is (scope ``principal``)."""
    session_id: str | None
    """Its session (scope ``session``)."""
    written_by: str
    """The principal that wrote it last."""
    created_at_ms: int
    updated_at_ms: int
    expires_at_ms: int | None
    deleted_at_ms: int | None = None
    deleted_by: str | None = None
    deleted_reason: str | None = None

    def visible_to(self, principal: str | None, session_id: str | None) -> bool:
        """Whether a run acting for ``principal`` in ``session_id`` may see this item."""
        if self.scope == "global":
            return True
        if self.scope == "session":
            return session_id is not None and self.session_id == session_id
        return principal is not None and self.principal == principal

    def expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and self.expires_at_ms <= now_ms


_NONE = (0.0, 0)
"""The BM25 and terms held of a candidate no query word matched."""


class MemoryHit(msgspec.Struct, frozen=True, kw_only=True):
    """A search result and how it scored (each score in ``[0, 1]``; ``evidence`` and ``terms``
    are what auto-injection also weighs, docs/context.md)."""

    item: MemoryItem
    lexical: float
    vector: float
    recency: float
    final: float
    evidence: float = 0.0
    """The item's BM25 in units of the IDF of a word only one item holds: what the query's
    words found in it weigh, whatever else the query says (``lexical`` is a share of the whole
    query, so a long message lowers it)."""
    terms: int = 0
    """How many of the query's distinct words (as searched) the item holds."""


def fts_terms(query: str) -> list[str]:
    """``query``'s distinct words, stop words dropped unless nothing else is left, at most
    :data:`MAX_QUERY_TERMS`. Empty when the query has no word at all."""
    return list(dict.fromkeys(content_words(query)))[:MAX_QUERY_TERMS]


def fts_match(terms: Sequence[str]) -> str:
    """``terms`` as one FTS5 expression that cannot be a syntax error: each word quoted
    (``"like"``), joined with ``OR``."""
    return " OR ".join(phrase(term) for term in terms)


def audiences(
    principal: str | None, session_id: str | None, scopes: Collection[MemoryScope] = ALL_SCOPES
) -> list[str]:
    """The audiences a caller sees: global items, its principal's, its session's (as allowed by
    ``scopes``). See :func:`projections.memory.view.audience_of`."""
    out = []
    if "global" in scopes:
        out.append(audience_of("global", None, None))
    if "principal" in scopes and principal:
        out.append(audience_of("principal", principal, None))
    if "session" in scopes and session_id:
        out.append(audience_of("session", None, session_id))
    return out


def _now_ms() -> int:
    return int(time.time() * 1000)


_ITEM_COLUMNS = (
    "item_id, text, source, tags, scope, principal, session_id, written_by, created_at_ms,"
    " updated_at_ms, expires_at_ms, deleted_at_ms, deleted_by, deleted_reason"
)
_tags = msgspec.json.Decoder(tuple[str, ...])
_json = msgspec.json.Encoder()
_ITEM_ID, _TEXT, _TAGS, _UPDATED = (
    _ITEM_COLUMNS.split(", ").index(name) for name in ("item_id", "text", "tags", "updated_at_ms")
)
"""Where a row of :data:`_ITEM_COLUMNS` holds what the search scores."""


def _item(row: Sequence[Any]) -> MemoryItem:
    values = list(row)
    values[3] = _tags.decode(values[3])
    names = _ITEM_COLUMNS.split(", ")
    return MemoryItem(**dict(zip(names, values, strict=True)))


def _marks(n: int) -> str:
    return ",".join("?" * n)


class MemoryView(PooledReader):
    """Queries over the memory tables of views.db (written by the projector).

    ``embedder`` must be the one the projector indexes with (the same ``[memory] embedder``):
    while the index was built by another (:meth:`index_fingerprint` differs, e.g. during the
    rebuild that follows a switch), the search ranks by words and recency only.

    ``matrix`` holds the index's vectors in memory for the nearest-neighbour search
    (:mod:`projections.memory.matrix`; its own when not given; a node gives the same one to its
    memory projection, which keeps it current). ``None`` after construction: sqlite-vec only."""

    def __init__(
        self,
        path: Path,
        embedder: Embedder | None = None,
        *,
        weights: SearchWeights | None = None,
        pool: int = 50,
        clock: Callable[[], int] = _now_ms,
        limits: ReaderLimits | None = None,
        matrix: VectorMatrix | None = None,
    ) -> None:
        super().__init__(path, limits)
        self.matrix: VectorMatrix | None = matrix if matrix is not None else VectorMatrix()
        self.embedder: Embedder = embedder if embedder is not None else HashingEmbedder()
        self.weights = weights if weights is not None else weights_for(self.embedder)
        self.pool = pool
        """How many candidates each index contributes (at least ``k``)."""
        self.clock = clock
        self.statistics = StatisticsCache()
        """BM25's figures of the index, kept until the fold changes it (docs/memory.md)."""

    def _connect(self) -> apsw.Connection:
        conn = super()._connect()
        # The KNN scan reads every vector: mapped pages save a copy per page (~35% faster at
        # 100k items). Address space only; a read-only connection never writes through it.
        conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
        load_vec(conn)
        memory_bm25.register(conn)
        return conn

    @contextmanager
    def _read(self) -> Iterator[apsw.Connection]:
        """A pooled read-only connection inside one read transaction (one snapshot)."""
        with self._borrow() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    # --- items ---------------------------------------------------------------------------------

    def get(
        self,
        item_id: str,
        *,
        include_deleted: bool = False,
        include_expired: bool = False,
        now_ms: int | None = None,
    ) -> MemoryItem | None:
        """The item (``None`` when unknown, deleted or expired unless asked for). Who may see it
        is the caller's decision (:meth:`MemoryItem.visible_to`)."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM memory_items WHERE item_id = ?", (item_id,)
            ).fetchone()
        if row is None:
            return None
        item = _item(row)
        if item.deleted_at_ms is not None and not include_deleted:
            return None
        if not include_expired and item.expired(self.clock() if now_ms is None else now_ms):
            return None
        return item

    def items(
        self,
        *,
        principal: str | None = None,
        session_id: str | None = None,
        scopes: Collection[MemoryScope] = ALL_SCOPES,
        everyone: bool = False,
        after: str | None = None,
        limit: int = 100,
        now_ms: int | None = None,
    ) -> list[MemoryItem]:
        """Live (not deleted, not expired) items by id (write order), after ``after``: those the
        caller sees, or with ``everyone`` every item of ``scopes`` whoever owns it."""
        now = self.clock() if now_ms is None else now_ms
        where = ["deleted_at_ms IS NULL", "(expires_at_ms IS NULL OR expires_at_ms > ?)"]
        args: list[Any] = [now]
        if everyone:
            where.append(f"scope IN ({_marks(len(scopes))})")
            args.extend(sorted(scopes))
        else:
            seen = audiences(principal, session_id, scopes)
            where.append(f"audience IN ({_marks(len(seen))})")
            args.extend(seen)
        where.append("item_id > ?")
        args.extend([after or "", limit])
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_ITEM_COLUMNS} FROM memory_items WHERE {' AND '.join(where)}"
                " ORDER BY item_id LIMIT ?",
                args,
            ).fetchall()
        return [_item(row) for row in rows]

    def index_fingerprint(self) -> str | None:
        """The fingerprint of the embedder that built the vector index (``None``: no index)."""
        with self._read() as conn:
            row = conn.execute("SELECT fingerprint FROM memory_index").fetchone()
        return None if row is None else str(row[0])

    # --- search --------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 5,
        *,
        principal: str | None = None,
        session_id: str | None = None,
        scopes: Collection[MemoryScope] = ALL_SCOPES,
        now_ms: int | None = None,
    ) -> list[MemoryHit]:
        """The ``k`` best items for ``query`` that a run acting for ``principal`` in
        ``session_id`` may see, best first. Never raises on what the query holds; an empty
        query, an empty index or nothing visible gives ``[]``."""
        seen = audiences(principal, session_id, scopes)
        terms = fts_terms(query)
        if k <= 0 or not seen or not terms:
            return []
        match = fts_match(terms)
        now = self.clock() if now_ms is None else now_ms
        pool = min(max(self.pool, k), VEC_MAX_K)
        with self._read() as conn:
            if not conn.execute("SELECT EXISTS (SELECT 1 FROM memory_items)").get:
                return []  # an empty memory, every run's until one is written: nothing to embed
            qvec = self.embedder.embed_query(query)
            indexed = conn.execute("SELECT fingerprint, changed_at FROM memory_index").fetchone()
            use_vectors = (
                indexed is not None and indexed[0] == self.embedder.fingerprint and any(qvec)
            )
            rows = set(self._lexical_top(conn, match, seen, now, pool))
            nearest = (
                self._nearest(conn, int(indexed[1]), qvec, seen, now, pool)
                if use_vectors and indexed is not None
                else []
            )
            cosine: dict[int, float] = {}
            if use_vectors and (rows or nearest):  # every candidate's cosine, in one statement
                for row, cos in conn.execute(
                    "SELECT j.value, 1 - vec_distance_cosine(v.embedding, ?)"
                    " FROM json_each(?) j CROSS JOIN memory_vec v ON v.item_row = j.value",
                    (pack_vector(qvec), _json.encode(sorted(rows.union(nearest))).decode()),
                ):
                    cosine[int(row)] = float(cos)
            candidates = sorted(rows | cosine.keys())
            # Both indexes filtered already; the rows are checked once more where they are read.
            # ``+audience``: look the rows up by ``row``, never by the audience index (which
            # would walk every global item).
            found = {
                int(row[0]): row[1:]
                for row in conn.execute(
                    f"SELECT row, {_ITEM_COLUMNS} FROM memory_items"
                    f" WHERE row IN ({_marks(len(candidates))}) AND deleted_at_ms IS NULL"
                    f" AND +audience IN ({_marks(len(seen))})"
                    " AND (expires_at_ms IS NULL OR expires_at_ms > ?)",
                    (*candidates, *seen, now),
                )
            }
            lexical: dict[int, tuple[float, int]] = {}
            ideal = unit = 0.0
            if rows:  # some visible item holds a query word: score every candidate by words
                stats = (
                    memory_bm25.statistics(conn, match, terms)
                    if indexed is None
                    else self.statistics.statistics(conn, int(indexed[1]), match, terms)
                )
                ideal, unit = sum(stats.idfs), stats.unique_idf
                scorer = memory_bm25.Scorer(conn, terms, stats.idfs, stats.mean)
                lexical = {
                    row: scorer.scored(raw[_TEXT], _tags.decode(raw[_TAGS]))
                    for row, raw in found.items()
                }
        scored = [
            (
                self._scores(
                    lexical.get(row, _NONE)[0], ideal, cosine.get(row), raw[_UPDATED], now
                ),
                lexical.get(row, _NONE),
                raw,
            )
            for row, raw in found.items()
        ]
        # Recency alone is not relevance: an item that neither the words nor the vector match
        # is not a hit, however new.
        hits = [hit for hit in scored if hit[0][0] > 0 or hit[0][1] > 0]
        hits.sort(key=lambda hit: (-hit[0][3], -hit[2][_UPDATED], hit[2][_ITEM_ID]))
        return [
            MemoryHit(
                item=_item(raw),
                lexical=lex,
                vector=vec,
                recency=rec,
                final=final,
                evidence=round(bm25 / unit, 6) if unit > 0 else 0.0,
                terms=held,
            )
            for (lex, vec, rec, final), (bm25, held), raw in hits[:k]
        ]

    def _scores(
        self, s: float, ideal: float, cos: float | None, updated_at_ms: int, now: int
    ) -> tuple[float, float, float, float]:
        """``(lexical, vector, recency, final)`` of a candidate whose BM25 is ``s`` and whose
        cosine is ``cos``, each rounded to 6 places (the ranking uses the rounded ``final``)."""
        w = self.weights
        lexical = min(1.0, s / ideal) if s > 0 and ideal > 0 else 0.0
        floor = self.embedder.similarity_floor
        vector = 0.0 if cos is None or math.isnan(cos) else (cos - floor) / (1.0 - floor)
        vector = min(1.0, max(0.0, vector))
        age = max(0, now - updated_at_ms)
        recency = 0.5 ** (age / w.half_life_ms) if w.half_life_ms > 0 else 0.0
        final = w.lexical * lexical + w.vector * vector + w.recency * recency
        return round(lexical, 6), round(vector, 6), round(recency, 6), round(final, 6)

    @staticmethod
    def _lexical_top(
        conn: apsw.Connection, match: str, seen: list[str], now: int, pool: int
    ) -> list[int]:
        """The ``pool`` best visible, unexpired rows by FTS5's own bm25 (in C, over the whole
        index), ties by row: the lexical candidates.

        Filtering inside the FTS5 walk costs a look-up of ``memory_items`` for every row holding
        any query word (at 100k items more than the walk itself), so first the
        ``LEXICAL_WIDEN * pool`` best rows are taken whoever sees them and only those are looked
        up. Both walks order by ``(bm25, row)``, so when ``pool`` of those are visible (or no
        other row matches) they are the first ``pool`` visible rows of the filtered walk; else
        the filtered walk is made (a caller who sees few of the rows that match)."""
        wt, wg = memory_bm25.WEIGHTS
        order = f"ORDER BY bm25(memory_fts, {wt}, {wg}), memory_fts.rowid LIMIT ?"
        wide = LEXICAL_WIDEN * pool
        best = [
            int(r)
            for (r,) in conn.execute(
                f"SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? {order}", (match, wide)
            )
        ]
        if not best:
            return []
        visible = {
            int(r)
            for (r,) in conn.execute(
                f"SELECT row FROM memory_items WHERE row IN ({_marks(len(best))})"
                f" AND +audience IN ({_marks(len(seen))})"
                " AND (expires_at_ms IS NULL OR expires_at_ms > ?)",
                (*best, *seen, now),
            )
        }
        if len(visible) >= pool or len(best) < wide:
            return [row for row in best if row in visible][:pool]
        sql = (
            "SELECT memory_fts.rowid FROM memory_fts JOIN memory_items i"
            " ON i.row = memory_fts.rowid"
            f" WHERE memory_fts MATCH ? AND i.audience IN ({_marks(len(seen))})"
            f" AND (i.expires_at_ms IS NULL OR i.expires_at_ms > ?) {order}"
        )
        return [int(r) for (r,) in conn.execute(sql, (match, *seen, now, pool))]

    def _nearest(
        self,
        conn: apsw.Connection,
        generation: int,
        qvec: Sequence[float],
        seen: list[str],
        now: int,
        pool: int,
    ) -> list[int]:
        """The ``pool`` nearest visible, unexpired rows, nearest first: from the matrix when
        it holds this snapshot's generation, else from sqlite-vec (:meth:`_vector_top`)."""
        if self.matrix is not None:
            keys = [audience_key(a) for a in seen]
            expiry = min(now, NO_EXPIRY - 1)
            rows = self.matrix.nearest(conn, generation, qvec, pool, keys, expiry)
            if rows is not None:
                return rows
        return self._vector_top(conn, qvec, seen, now, pool)

    @staticmethod
    def _vector_top(
        conn: apsw.Connection, qvec: Sequence[float], seen: list[str], now: int, pool: int
    ) -> list[int]:
        """The ``pool`` nearest visible, unexpired rows, nearest first.

        The index measures Euclidean distance: for unit vectors (every embedder's) its order
        is the cosine's (``|a - b|^2 = 2 - 2 cos``), and sqlite-vec scans it faster (at
        100,000 items of 256 dimensions ~35 against ~48 ms of CPU, the same 50 rows for each
        of 100 queries). The candidates' cosines are computed by ``vec_distance_cosine``
        (:meth:`search`), so scores are the ones a cosine index gave.

        As for the lexical candidates (:meth:`_lexical_top`), the ``LEXICAL_WIDEN * pool``
        nearest rows are taken first whoever sees them, and only those are looked up: the scan
        filtered on its metadata columns cost ~12 ms more at 100,000 items. Both scans order by
        distance, so when ``pool`` of those are visible (or no other row exists) they are the
        first ``pool`` of the filtered scan; else the filtered scan is made."""
        vector = pack_vector(qvec)
        wide = min(LEXICAL_WIDEN * pool, VEC_MAX_K)
        best = [
            int(r)
            for (r,) in conn.execute(
                "SELECT item_row FROM memory_vec WHERE embedding MATCH ? AND k = ?", (vector, wide)
            )
        ]
        if not best:
            return []
        visible = {
            int(r)
            for (r,) in conn.execute(
                f"SELECT row FROM memory_items WHERE row IN ({_marks(len(best))})"
                f" AND +audience IN ({_marks(len(seen))}) AND deleted_at_ms IS NULL"
                " AND (expires_at_ms IS NULL OR expires_at_ms > ?)",
                (*best, *seen, now),
            )
        }
        if len(visible) >= pool or len(best) < wide:
            return [row for row in best if row in visible][:pool]
        sql = (
            "SELECT item_row FROM memory_vec WHERE embedding MATCH ? AND k = ?"
            f" AND audience_key IN ({_marks(len(seen))}) AND expires_at_ms > ?"
        )
        expiry = min(now, NO_EXPIRY - 1)
        keys = [audience_key(a) for a in seen]
        return [int(r) for (r,) in conn.execute(sql, (vector, pool, *keys, expiry))]
