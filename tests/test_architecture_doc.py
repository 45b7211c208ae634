"""docs/architecture.md tells a newcomer where things are: every path it names exists, and the
questions it promises to answer in two hops each name code that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"`((?:events|projections|policies|tools|actors|transports|tests)/[\w/.]*)`")


def test_every_path_the_architecture_names_exists() -> None:
    named = set(PATH.findall(DOC.read_text()))
    assert len(named) > 40  # the page walks the whole tree
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_the_two_hop_questions_are_answered() -> None:
    text = DOC.read_text()
    table = text.split("## Where to find what decides", 1)[1].split("\n## ", 1)[0]
    for question in (
        "approval times out",
        "memory is injected",
        "session is compacted",
        "task is reclaimed",
        "sender is paired",
        "token is revoked",
    ):
        row = next((line for line in table.splitlines() if question in line), None)
        assert row is not None, question
        assert PATH.search(row), f"{question}: no path"
