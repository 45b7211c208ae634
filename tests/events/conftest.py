"""Fixtures for the journal tests: a pristine journal built once per session, copied per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import NodeKey
from tests.events.journal_testkit import build_journal, copy_journal


@pytest.fixture(scope="session")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NodeKey]:
    """A closed 131-event journal with four checkpoints, the last at 131 (built once)."""
    data = tmp_path_factory.mktemp("pristine")
    key = build_journal(data)
    return data, key


@pytest.fixture
def journal_copy(pristine: tuple[Path, NodeKey], tmp_path: Path) -> Path:
    """A private copy of the pristine journal for a test to tamper with."""
    return copy_journal(pristine[0], tmp_path / "copy")
