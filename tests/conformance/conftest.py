"""The conformance suites' fixtures: the aggregate tape, recorded once per session from a real
node (tests/conformance/aggregate_tape.py), and the data dir whose journal holds it; the node
the edge suites share (tests/conformance/edge.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.aggregate import Tape
from tests.conformance.aggregate_tape import record_tape
from tests.conformance.edge import World, open_world


@pytest.fixture(scope="session")
def tape_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("aggregate-tape") / "data"
    data_dir.mkdir(mode=0o700)
    return data_dir


@pytest.fixture(scope="session")
def tape(tape_data_dir: Path) -> Tape:
    return record_tape(tape_data_dir)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One node for every case of the edge suites of a module (tests/conformance/edge.py)."""
    data_dir = tmp_path_factory.mktemp("edges") / "data"
    data_dir.mkdir(mode=0o700)
    yield from open_world(data_dir)
