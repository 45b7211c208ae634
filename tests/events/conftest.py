"""Fixtures for the journal tests: a pristine journal built once per session, copied per test."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from events import NodeKey
from tests.events.journal_testkit import build_journal, copy_journal


class Pristine(NamedTuple):
    """A closed journal written by the real :class:`events.Journal`, its key and its witness."""

    data: Path
    key: NodeKey
    witness: Path


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Pristine:
    """A closed journal of 131 events and 4 checkpoint rows (at 42, 83, 124 and 135, the head),
    built once, with its witness outside the data dir (tests must not change either)."""
    root = tmp_path_factory.mktemp("pristine")
    witness = root / "witness.notes"
    key = build_journal(root / "data", witness=witness)
    return Pristine(root / "data", key, witness)


@pytest.fixture
def journal_copy(pristine: Pristine, tmp_path: Path) -> Path:
    """A private copy of the pristine journal for a test to tamper with."""
    return copy_journal(pristine.data, tmp_path / "copy")
