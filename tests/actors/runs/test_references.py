"""Parsing a message's context references (actors/runs/references.py): where one starts and ends,
the ``@@`` escape, repeats read once, and the governed calls of file and URL references."""

from __future__ import annotations

from actors.runs.references import parse


def labels(text: str) -> list[tuple[str, int]]:
    return [(r.label, r.index) for r in parse(text)]


def test_a_reference_starts_after_whitespace_or_a_bracket_and_drops_trailing_punctuation() -> None:
    assert labels("see @file:a.md, (@run:R1) and x@file:b [@memory:M2].") == [
        ("@file:a.md", 1),
        ("@run:R1", 2),
        ("@memory:M2", 3),
    ]


def test_the_escape_is_never_a_reference() -> None:
    assert labels("@@file:a.md and @@@file:b.md") == []
    assert labels("mail me @@ @file:c.md") == [("@file:c.md", 1)]


def test_a_repeated_reference_is_one_reference_read_once() -> None:
    refs = parse("@file:a.md then @url:https://x.test/ and @file:a.md. again @file:b.md")
    assert [(r.label, r.call_id) for r in refs] == [
        ("@file:a.md", "ref-1"),
        ("@url:https://x.test/", "ref-2"),
        ("@file:b.md", "ref-3"),
    ]
    # the same target under another kind is another reference
    assert labels("@memory:X @run:X @memory:X") == [("@memory:X", 1), ("@run:X", 2)]


def test_file_and_url_references_are_governed_calls_memory_and_run_are_not() -> None:
    calls = [r.call() for r in parse("@file:a.md @url:https://x.test/p @memory:M @run:R")]
    assert [(c.name, c.arguments) if c else None for c in calls] == [
        ("fs.read", '{"path": "a.md"}'),
        ("http.fetch", '{"url": "https://x.test/p"}'),
        None,
        None,
    ]
