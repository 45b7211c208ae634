"""Okapi BM25 of a search's candidate items, computed from their text.

The memory search scores every candidate by words (docs/memory.md, "Search"), including the
vector candidates FTS5 did not rank. Asking FTS5 for those rows' scores costs a second walk of
every row that holds any query word (a ``MATCH`` restricted to a rowid list still walks the
whole match): at 100,000 items about as long as finding the lexical candidates in the first
place. The candidates' texts are already read, so their scores are computed here instead, from
the same things FTS5 would use:

- the tokens of each column (``text``, and ``tags`` joined by spaces) from FTS5's own
  tokenizer (:data:`TOKENIZER`, the one ``memory_fts`` is declared with), so stemming and
  case folding are FTS5's;
- a query word's tokens as FTS5 tokenizes a quoted phrase, counted where they occur in a row
  in sequence (a phrase of several tokens, ``don't`` -> ``don t``, counts only adjacent);
- the index's row count and total token count, and each word's document count (:func:`statistics`;
  kept between folds by :mod:`projections.memory.stats`), and from them the IDFs.

The result equals BM25 computed by an FTS5 auxiliary function over FTS5's phrase locations
(tests/projections/test_memory_bm25.py checks it, row by row).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import apsw
import msgspec

TOKENIZER = ("porter", ("unicode61", "remove_diacritics", "2"))
"""``memory_fts``'s tokenizer and its arguments (its DDL is built from this)."""
WEIGHTS = (1.0, 0.5)
"""Column weights: ``text``, ``tags``."""
K1 = 1.2
B = 0.75
"""BM25's term-frequency saturation and length normalisation (FTS5's values)."""

_json = msgspec.json.Encoder()


def tokenize_spec() -> str:
    """:data:`TOKENIZER` as FTS5's ``tokenize=`` argument."""
    name, args = TOKENIZER
    return " ".join((name, *args))


def _row_count(api: apsw.FTS5ExtensionApi, *_: Any) -> int:
    return api.row_count


def _token_count(api: apsw.FTS5ExtensionApi, *_: Any) -> int:
    return api.column_total_size(-1)


def register(conn: apsw.Connection) -> None:
    """The FTS5 auxiliary functions :func:`statistics` reads through (per connection)."""
    conn.register_fts5_function("reel_rows", _row_count)
    conn.register_fts5_function("reel_tokens", _token_count)


def totals(conn: apsw.Connection, match: str) -> tuple[int, int]:
    """The index's row count ``N`` and token total, FTS5's own (read through auxiliary functions
    on one row matching ``match``: ``count(*)`` would scan the index); ``(0, 0)`` when no row
    matches."""
    found: Any = conn.execute(
        "SELECT reel_rows(memory_fts), reel_tokens(memory_fts) FROM memory_fts"
        " WHERE memory_fts MATCH ? LIMIT 1",
        (match,),
    ).fetchone()
    return (int(found[0]), int(found[1])) if found else (0, 0)


def document_counts(conn: apsw.Connection, terms: Sequence[str]) -> list[int]:
    """How many rows hold each term (as a phrase) in either column: ``n`` of its IDF. One
    statement for them all (each count is still its own walk of the term's rows)."""
    if not terms:
        return []
    phrases = _json.encode([phrase(term) for term in terms]).decode()
    found = {
        int(index): int(n)
        for index, n in conn.execute(
            "SELECT j.key, (SELECT count(*) FROM memory_fts WHERE memory_fts MATCH j.value)"
            " FROM json_each(?) j",
            (phrases,),
        )
    }
    return [found[index] for index in range(len(terms))]


class Statistics(NamedTuple):
    """What BM25 needs of the index for one query."""

    idfs: list[float]
    """Each term's IDF, in the query's order."""
    mean: float
    """The mean row length in tokens."""
    unique_idf: float
    """The IDF of a word only one row holds: the unit of a hit's ``evidence``."""


def _idf(rows: int, n: int) -> float:
    return math.log(1.0 + (rows - n + 0.5) / (n + 0.5))


def from_counts(rows: int, tokens: int, counts: Sequence[int]) -> Statistics:
    """Each term's IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))`` for its document count ``n``, and
    the mean row length in tokens, from the index's ``rows`` (``N``) and ``tokens``. The IDF is
    never negative, unlike the one FTS5's bm25 uses (which it clamps to ~0 for any phrase in
    half the rows or more, i.e. for every word of a memory of two items)."""
    return Statistics(
        idfs=[_idf(rows, n) for n in counts],
        mean=tokens / rows if rows else 0.0,
        unique_idf=_idf(rows, 1),
    )


def statistics(conn: apsw.Connection, match: str, terms: Sequence[str]) -> Statistics:
    """:func:`from_counts` of the index as ``conn`` sees it now: one query for its
    :func:`totals`, and the terms' :func:`document_counts` (what
    :class:`projections.memory.stats.StatisticsCache` saves between folds)."""
    rows, tokens = totals(conn, match)
    return from_counts(rows, tokens, document_counts(conn, terms))


class Scorer:
    """BM25 of texts for one query (its terms and :func:`statistics`), on ``conn``'s copy of
    FTS5's tokenizer."""

    def __init__(
        self, conn: apsw.Connection, terms: Sequence[str], idfs: Sequence[float], mean: float
    ) -> None:
        name, args = TOKENIZER
        self._tokenize = conn.fts5_tokenizer(name, list(args))
        self._phrases = [self._tokens(term, apsw.FTS5_TOKENIZE_QUERY) for term in terms]
        self._idfs = list(idfs)
        self._mean = mean
        self._firsts = frozenset(words[0] for words in self._phrases if words)
        """Each phrase's first token: a row holding none of them scores 0."""

    def _tokens(self, text: str, flags: int) -> list[str]:
        tokens = self._tokenize(
            text.encode("utf-8", "surrogatepass"),
            flags,
            None,
            include_offsets=False,
            include_colocated=False,
        )
        return [str(token) for token in tokens]  # without offsets or colocated: plain strings

    def score(self, text: str, tags: Sequence[str]) -> float:
        """BM25 of a row holding ``text`` and ``tags`` (0 when it holds no term)."""
        return self.scored(text, tags)[0]

    def scored(self, text: str, tags: Sequence[str]) -> tuple[float, int]:
        """BM25 of a row holding ``text`` and ``tags`` (0 when it holds no term), and how many
        of the query's terms it holds. Only the phrases whose first token the row holds are
        counted (the others occur 0 times), in the query's order: the sum is the one over every
        phrase, bit for bit."""
        text_tokens = self._tokens(text, apsw.FTS5_TOKENIZE_DOCUMENT)
        tag_tokens = self._tokens(" ".join(tags), apsw.FTS5_TOKENIZE_DOCUMENT) if tags else []
        present = self._firsts.intersection(text_tokens)
        if tag_tokens:
            present |= self._firsts.intersection(tag_tokens)
        if not present:
            return 0.0, 0
        length = len(text_tokens) + len(tag_tokens)
        norm = K1 * (1.0 - B + B * length / self._mean) if self._mean > 0 else K1
        score = 0.0
        held = 0
        for words, idf in zip(self._phrases, self._idfs, strict=True):
            if not words or words[0] not in present:
                continue
            f = WEIGHTS[0] * _occurrences(text_tokens, words)
            if tag_tokens:
                f += WEIGHTS[1] * _occurrences(tag_tokens, words)
            if f > 0:
                score += idf * f * (K1 + 1.0) / (f + norm)
                held += 1
        return score, held


def phrase(term: str) -> str:
    """``term`` as an FTS5 phrase that cannot be a syntax error (quoted)."""
    return '"' + term.replace('"', '""') + '"'


def _occurrences(tokens: list[str], phrase: list[str]) -> int:
    """How many times ``phrase`` occurs in ``tokens`` as a run of adjacent tokens."""
    n = len(phrase)
    if n == 0:
        return 0
    if n == 1:
        return tokens.count(phrase[0])
    return sum(1 for i in range(len(tokens) - n + 1) if tokens[i : i + n] == phrase)
