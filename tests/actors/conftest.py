"""Fixtures for the actor tests: real nodes on tmp dirs (see nodekit.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.actors.nodekit import NodeKit

MakeNode = Callable[..., NodeKit]


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[MakeNode]:
    """Build started nodes (keyword arguments as :class:`NodeKit`); all stop at teardown."""
    kits: list[NodeKit] = []

    def make(**options: Any) -> NodeKit:
        kit = NodeKit(tmp_path / f"node{len(kits)}", **options)
        kits.append(kit)
        return kit

    yield make
    for kit in reversed(kits):
        kit.close()


@pytest.fixture
def kit(make_node: MakeNode) -> NodeKit:
    """A node with the default test settings (small budgets, shell allowlist ``echo``)."""
    return make_node()
