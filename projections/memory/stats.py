"""The memory index's BM25 statistics, kept between searches until the fold changes the index.

Every search scores its candidates by Okapi BM25 (:mod:`projections.memory.bm25`), which needs
the index's row count ``N``, its token total, and for each query word ``n``, the number of rows
holding it. FTS5 answers each ``n`` with a query that walks every row holding the word: a
search of a 16-word message made 17 queries for figures that change only when a memory event
is folded.

:class:`StatisticsCache` keeps those figures for one *generation*: ``memory_index.changed_at``,
the journal position of the last event that changed the index (:mod:`projections.memory.view`). The
index at a generation is the fold of the journal up to that position (by this code: a schema or
tokenizer change comes with a new release, that is a new process and new caches), so a figure
counted at one generation is right for every read that sees the same generation and is used by
no other: a search reads the generation inside its own read transaction (the snapshot it counts
and scores in) and takes figures of that generation only; on any other generation the figures
kept are dropped and counted again. A write, a rewrite or a delete moves the generation in the
same commit as the index. Expiry moves nothing and needs nothing: it is a read-time filter, and
an expired item stays in the index (and in its figures) until it is deleted.

The figures are integers read from FTS5; the IDFs are computed from them by the same function
as without the cache (:func:`projections.memory.bm25.from_counts`), so scores are bit for bit
the ones an uncached search computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from projections.memory import bm25 as memory_bm25

MAX_TERMS = 65_536
"""At most this many words' document counts are kept (then they are dropped and counted again
as searches ask for them): a bound on memory whatever the queries hold."""


class _Figures:
    """The figures counted so far at one generation."""

    __slots__ = ("counts", "generation", "totals")

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.totals: tuple[int, int] | None = None
        """``(N, token total)``, once a search has read them."""
        self.counts: dict[str, int] = {}
        """Document count by query word."""


class StatisticsCache:
    """BM25 statistics of ``memory_fts`` by generation, shared by a view's searches (any
    thread: each figure is counted in the asking search's snapshot, and two searches that count
    the same figure at the same generation count the same number)."""

    def __init__(self, max_terms: int = MAX_TERMS) -> None:
        self._max_terms = max_terms
        self._figures: _Figures | None = None
        self.counted = 0
        """How many figures were read from FTS5 (not served from the cache): for tests."""

    @property
    def generation(self) -> int | None:
        """The generation whose figures are kept (``None``: none yet)."""
        figures = self._figures
        return None if figures is None else figures.generation

    def statistics(
        self, conn: apsw.Connection, generation: int, match: str, terms: Sequence[str]
    ) -> memory_bm25.Statistics:
        """:func:`projections.memory.bm25.statistics` of ``terms`` (``match``: their ``OR``,
        which some row must match) on ``conn``, whose read transaction sees ``generation``."""
        figures = self._figures
        if figures is None or figures.generation != generation:
            figures = _Figures(generation)
            self._figures = figures
        totals = figures.totals
        if totals is None:
            totals = memory_bm25.totals(conn, match)
            self.counted += 1
            if totals[0] > 0:  # read through a matching row; none matched: not the index's
                figures.totals = totals
        # Read out of the shared dict once, each word by one ``get``: another search may replace
        # it meanwhile (below), and this one still needs every figure it saw there.
        kept = figures.counts
        distinct = dict.fromkeys(terms)
        known = {t: n for t in distinct if (n := kept.get(t)) is not None}
        missing = [term for term in distinct if term not in known]
        counted = dict(zip(missing, memory_bm25.document_counts(conn, missing), strict=True))
        self.counted += len(missing)
        known.update(counted)
        if len(kept) + len(counted) > self._max_terms:
            figures.counts = counted  # a new dict, never a clear of the one others read
        else:
            kept.update(counted)
        return memory_bm25.from_counts(*totals, [known[term] for term in terms])
