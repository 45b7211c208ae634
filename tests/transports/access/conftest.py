"""Fixtures for the HTTP API tests: a real node per test (see httpkit.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.transports.http.httpkit import HttpNode, close_node, open_node


@pytest.fixture
def node(data_dir: Path) -> Iterator[HttpNode]:
    """A node with the API on 127.0.0.1:<free port>, ``echo`` allowed for shell.run."""
    running = open_node(data_dir, keepalive_s=0.3)
    try:
        yield running
    finally:
        close_node(running)
