"""The projection seam's conformance suite: what every read model of views.db must satisfy,
run against each projection over the journal the aggregate scenario recorded on a real node.

- folding one event per batch leaves exactly the rows one batch of everything leaves (a
  projection must not depend on where the projector cuts its transactions: it cuts them by
  size, and differently after a restart);
- a version bump drops the projection's tables and rebuilds rows identical to the ones it had
  (what ``reel`` does after an upgrade changes a projection: nothing may depend on the order
  the tables were built in or on the time of the build);
- the tables it declares are the tables it creates (a table it does not declare survives a
  version bump with stale rows; ``reel replay`` compares only the declared ones).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import apsw
import pytest

from events import JournalReader
from projections.base import Projection
from projections.memory.view import load_vec
from projections.projector import Projector
from tests.conformance.aggregate import Tape


def rows(path: Path, tables: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``tables``, sorted (row ids and insertion order are not the contract)."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    load_vec(conn)  # the memory view's vector index is a sqlite-vec table
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in tables:
            found = conn.execute(f"SELECT * FROM {table}").fetchall()
            out[table] = sorted(found, key=repr)
        return out
    finally:
        conn.close()


def created_tables(path: Path) -> set[str]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        names = conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
        return {str(name) for (name,) in names} - {"projection_checkpoints"}
    finally:
        conn.close()


class ProjectionConformance:
    """Subclass per projection, setting :attr:`make` to a factory of a fresh instance."""

    make: ClassVar[Callable[[], Projection]]

    @pytest.fixture()
    def journal(self, tape: Tape, tape_data_dir: Path) -> Any:
        assert tape.rows, "the scenario recorded nothing"
        reader = JournalReader.open(tape_data_dir / "journal.db")
        yield reader
        reader.close()

    def fold(self, journal: Any, path: Path, batch: int) -> Projection:
        projection = type(self).make()
        projector = Projector(journal, path, [projection], batch=batch, durable=False)
        try:
            projector.catch_up()
        finally:
            projector.close()
        return projection

    def test_the_scenario_gives_the_projection_rows(self, journal: Any, tmp_path: Path) -> None:
        projection = self.fold(journal, tmp_path / "views.db", 100_000)
        found = rows(tmp_path / "views.db", projection.tables)
        assert any(found.values()), f"{projection.name}: the tape left no row to compare"

    def test_one_event_at_a_time_equals_one_batch(self, journal: Any, tmp_path: Path) -> None:
        projection = self.fold(journal, tmp_path / "single.db", 1)
        self.fold(journal, tmp_path / "whole.db", 100_000)
        single = rows(tmp_path / "single.db", projection.tables)
        whole = rows(tmp_path / "whole.db", projection.tables)
        assert single == whole

    def test_a_version_bump_rebuilds_identical_rows(self, journal: Any, tmp_path: Path) -> None:
        path = tmp_path / "views.db"
        projection = self.fold(journal, path, 100_000)
        before = rows(path, projection.tables)
        bumped = type(self).make()
        bumped.version = projection.version + 1
        projector = Projector(journal, path, [bumped], durable=False)
        try:
            assert projector.position == 0  # dropped: the rebuild starts from the first event
            projector.catch_up()
        finally:
            projector.close()
        assert rows(path, bumped.tables) == before

    def test_a_batch_that_rolls_back_leaves_nothing_behind(
        self, journal: Any, tmp_path: Path
    ) -> None:
        """A projection that keeps a batch's rows or sums in memory until its ``flush`` forgets
        them when the batch rolls back (its ``reset``): the batch folded again leaves exactly
        the rows of a fold that never failed."""
        path = tmp_path / "views.db"
        projection = self.fold(journal, tmp_path / "whole.db", 100_000)
        head = journal.head().position
        failing = FailsOnce(at=head // 2 + 1)
        projector = Projector(journal, path, [type(self).make(), failing], durable=False)
        try:
            with pytest.raises(RuntimeError, match="rolled back"):
                projector.catch_up()
            assert failing.failed
            projector.catch_up()
        finally:
            projector.close()
        assert rows(path, projection.tables) == rows(tmp_path / "whole.db", projection.tables)

    def test_it_declares_every_table_it_creates(self, journal: Any, tmp_path: Path) -> None:
        projection = self.fold(journal, tmp_path / "views.db", 100_000)
        owned = set(projection.tables)
        extra = {t for t in created_tables(tmp_path / "views.db") - owned if not shadow(t, owned)}
        assert extra == set()


class FailsOnce:
    """A projection that fails its batch once, at the first event at or after ``at``."""

    name = "fails_once"
    version = 1
    tables: tuple[str, ...] = ()
    ddl = ""
    kinds: frozenset[str] | None = None

    def __init__(self, at: int) -> None:
        self.at = at
        self.failed = False

    def apply(self, conn: apsw.Connection, stored: Any, event: Any) -> None:
        if not self.failed and stored.position >= self.at:
            self.failed = True
            raise RuntimeError("this batch is rolled back")


def shadow(table: str, owned: set[str]) -> bool:
    """A virtual table's shadow tables (``memory_vec_chunks`` of ``memory_vec``) belong to it."""
    return any(table.startswith(f"{name}_") for name in owned)
