"""The coalescer: redacted text in chunks of ~16 words or 50 ms, nothing lost at the turn's end,
nothing of a stopped turn kept."""

from __future__ import annotations

from actors.runs.coalesce import Chunk, Coalescer
from events import MARKER

SECRET = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"


def test_chunks_hold_released_text_and_the_turn_end_releases_the_rest() -> None:
    c = Coalescer(max_words=4, max_age_s=10.0)
    words = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    got = []
    for w in words:
        got += [c.add(w + " ", now=0.0), c.tick(now=0.0)]  # a tick after each delta
    assert [ch.text for ch in got if ch is not None] == [
        "one two three four ",
        "five six seven eight ",
    ]
    assert c.end_turn(now=0.0) == Chunk("nine ten ", 0)
    assert c.end_turn(now=0.0) is None


def test_a_final_release_over_the_word_limit_is_one_chunk_not_lost() -> None:
    c = Coalescer(max_words=2, max_age_s=10.0)
    text = f"a b c d e f Bearer {SECRET}"  # the trigger holds everything from "Bearer" on
    early: list[Chunk | None] = []
    for char in text:
        early += [c.add(char, now=0.0), c.tick(now=0.0)]
    assert "".join(ch.text for ch in early if ch is not None) == "a b c d e f "
    last = c.end_turn(now=0.0)
    assert last == Chunk(f"Bearer {MARKER}", 1)


def test_a_secret_split_across_deltas_is_one_marker_and_counted() -> None:
    c = Coalescer(max_words=16, max_age_s=10.0)
    out = [c.add(part, now=0.0) for part in ("token ", SECRET[:10], SECRET[10:], " ok")]
    out.append(c.end_turn(now=0.0))
    chunks = [ch for ch in out if ch is not None]
    assert "".join(ch.text for ch in chunks) == f"token {MARKER} ok"
    assert sum(ch.redacted for ch in chunks) == 1


def test_age_and_pending() -> None:
    c = Coalescer(max_words=100, max_age_s=0.05)
    assert c.add("hello ", now=1.0) is None
    assert c.pending and not c.buffered  # held by the redactor until a scan or a tick
    assert c.tick(now=1.0) is None and c.buffered
    assert not c.due(1.01) and c.due(1.06)
    assert c.add("world ", now=1.06) is None
    assert c.tick(now=1.06) == Chunk("hello world ", 0)
    assert not c.pending


def test_drop_forgets_buffered_and_held_text() -> None:
    c = Coalescer(max_words=100, max_age_s=10.0)
    c.add("kept? ", now=0.0)
    c.add("password: hunter2", now=0.0)
    c.drop()
    assert c.end_turn(now=0.0) is None
