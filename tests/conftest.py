"""Fixtures for the whole suite. Keep this small: package-specific fixtures belong in the
package's own ``tests/<package>/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import postgres_server
from tests.postgres_server import PostgresServer


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An empty reel data dir (``--data``) of its own for one test, private as reel makes one
    (a wider one is tightened with a warning: tests/transports/test_data_dir_modes.py)."""
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL for the session (tests/postgres_server.py); skips when the
    postgresql-15 binaries are absent."""
    if not postgres_server.available():
        pytest.skip(f"PostgreSQL 15 is not installed ({postgres_server.BIN}): make installs it")
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()
