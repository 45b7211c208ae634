"""Every projection of views.db against the projection conformance suite
(tests/conformance/projection.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from events import Event, StoredEvent
from projections.approvals_view import ApprovalsProjection
from projections.incidents import IncidentsProjection
from projections.learning import LearningProjection
from projections.memory.view import MemoryProjection
from projections.projector import all_projections
from projections.runs import RunsProjection
from projections.sessions import SessionsProjection
from projections.tape import TapeProjection
from projections.tasks import TasksProjection
from projections.tool_usage import ToolUsageProjection
from projections.usage import UsageProjection
from tests.conformance.projection import ProjectionConformance


class TestSessionsProjection(ProjectionConformance):
    make = SessionsProjection


class TestRunsProjection(ProjectionConformance):
    make = RunsProjection


class TestTapeProjection(ProjectionConformance):
    make = TapeProjection


class TestApprovalsProjection(ProjectionConformance):
    make = ApprovalsProjection


class TestToolUsageProjection(ProjectionConformance):
    make = ToolUsageProjection


class TestMemoryProjection(ProjectionConformance):
    make = MemoryProjection


class TestTasksProjection(ProjectionConformance):
    make = TasksProjection


class TestLearningProjection(ProjectionConformance):
    make = LearningProjection


class TestIncidentsProjection(ProjectionConformance):
    make = IncidentsProjection


class TestUsageProjection(ProjectionConformance):
    make = UsageProjection


def test_every_projection_has_a_conformance_class() -> None:
    tested = {
        cls.make().name
        for cls in ProjectionConformance.__subclasses__()
        if cls.__module__ == __name__ and cls not in BROKEN
    }
    assert tested == {p.name for p in all_projections()}


class Clocked:
    """A projection that breaks the contract: its rows carry the time they were built."""

    name = "clocked"
    version = 1
    tables: tuple[str, ...] = ("clocked",)
    ddl = "CREATE TABLE IF NOT EXISTS clocked(position INTEGER PRIMARY KEY, built_ns INTEGER)"
    kinds: frozenset[str] | None = None

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        conn.execute("INSERT INTO clocked VALUES (?, ?)", (stored.position, time.perf_counter_ns()))


class TestTheSuiteCatchesABrokenProjection(ProjectionConformance):
    make = Clocked

    def test_a_version_bump_rebuilds_identical_rows(self, journal: Any, tmp_path: Path) -> None:
        with pytest.raises(AssertionError):
            super().test_a_version_bump_rebuilds_identical_rows(journal, tmp_path)

    def test_one_event_at_a_time_equals_one_batch(self, journal: Any, tmp_path: Path) -> None:
        with pytest.raises(AssertionError):
            super().test_one_event_at_a_time_equals_one_batch(journal, tmp_path)

    def test_a_batch_that_rolls_back_leaves_nothing_behind(
        self, journal: Any, tmp_path: Path
    ) -> None:
        with pytest.raises(AssertionError):
            super().test_a_batch_that_rolls_back_leaves_nothing_behind(journal, tmp_path)


class Forgetful:
    """A projection that breaks the contract: it sums a batch in memory until its flush and
    has no ``reset``, so a batch that rolled back is counted again with its retry."""

    name = "forgetful"
    version = 1
    tables: tuple[str, ...] = ("forgetful",)
    ddl = "CREATE TABLE IF NOT EXISTS forgetful(kind TEXT PRIMARY KEY, n INTEGER NOT NULL)"
    kinds: frozenset[str] | None = None

    def __init__(self) -> None:
        self.sums: dict[str, int] = {}

    def apply(self, conn: apsw.Connection, stored: StoredEvent, event: Event) -> None:
        self.sums[stored.kind] = self.sums.get(stored.kind, 0) + 1

    def flush(self, conn: apsw.Connection) -> None:
        conn.executemany(
            "INSERT INTO forgetful VALUES (?, ?)"
            " ON CONFLICT(kind) DO UPDATE SET n = n + excluded.n",
            list(self.sums.items()),
        )
        self.sums = {}


class TestTheSuiteCatchesABatchKeptAfterItsRollback(ProjectionConformance):
    make = Forgetful

    def test_a_batch_that_rolls_back_leaves_nothing_behind(
        self, journal: Any, tmp_path: Path
    ) -> None:
        with pytest.raises(AssertionError):
            super().test_a_batch_that_rolls_back_leaves_nothing_behind(journal, tmp_path)


BROKEN = (TestTheSuiteCatchesABrokenProjection, TestTheSuiteCatchesABatchKeptAfterItsRollback)
"""The suite's own checks: projections built to fail it."""
