"""The conformance suites' fixtures: the aggregate tape, recorded once per session from a real
node (tests/conformance/aggregate_tape.py)."""

from __future__ import annotations

import pytest

from tests.conformance.aggregate import Tape
from tests.conformance.aggregate_tape import record_tape


@pytest.fixture(scope="session")
def tape(tmp_path_factory: pytest.TempPathFactory) -> Tape:
    data_dir = tmp_path_factory.mktemp("aggregate-tape") / "data"
    data_dir.mkdir(mode=0o700)
    return record_tape(data_dir)
