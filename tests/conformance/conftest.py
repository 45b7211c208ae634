"""The conformance suites' fixtures: the aggregate tape, recorded once per session from a real
node (tests/conformance/aggregate_tape.py), and the data dir whose journal holds it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.aggregate import Tape
from tests.conformance.aggregate_tape import record_tape


@pytest.fixture(scope="session")
def tape_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("aggregate-tape") / "data"
    data_dir.mkdir(mode=0o700)
    return data_dir


@pytest.fixture(scope="session")
def tape(tape_data_dir: Path) -> Tape:
    return record_tape(tape_data_dir)
