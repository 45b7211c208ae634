"""Fixtures for the whole suite. Keep this small: package-specific fixtures belong in the
package's own ``tests/<package>/conftest.py``."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """An empty reel data dir (``--data``) of its own for one test, private as reel makes one
    (a wider one is tightened with a warning: tests/transports/test_data_dir_modes.py)."""
    path = tmp_path / "data"
    path.mkdir(mode=0o700)
    return path
