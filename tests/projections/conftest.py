"""Fixtures the projection tests share: a real journal in the test's data dir, and where its
views live."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from events import Journal, NodeKey


@pytest.fixture
def journal(data_dir: Path) -> Iterator[Journal]:
    """A signing journal (its own node key) in ``data_dir``, closed after the test."""
    with Journal(data_dir / "journal.db", node_key=NodeKey.load_or_create(data_dir / "k")) as j:
        yield j


@pytest.fixture
def views(data_dir: Path) -> Path:
    """Where the test's views.db goes (not created)."""
    return data_dir / "views.db"
