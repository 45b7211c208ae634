"""The journal port's conformance suite against both backends: SQLite (:class:`events.Journal`,
one shard) and PostgreSQL (:class:`events.postgres.journal.PostgresJournal`, four shards), each
with its own whole-journal verification (``reel journal verify``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import Journal, JournalPort, JournalReader, JournalReadPort, NodeKey, verify
from events.postgres.database import initialise
from events.postgres.journal import PostgresJournal
from events.postgres.reader import PostgresReader
from events.postgres.verify import verify_database
from tests.events.journal_conformance import JournalConformance
from tests.events.journal_testkit import JOURNAL, KEY
from tests.postgres_server import PostgresServer


class TestSqliteJournalConformance(JournalConformance):
    def make_journal(self, tmp_path: Path) -> JournalPort:
        key = NodeKey.load_or_create(tmp_path / KEY)
        # A cadence no test reaches: checkpoints come from checkpoint() and close() only.
        return Journal(tmp_path / JOURNAL, node_key=key, checkpoint_every_events=1_000_000)

    def make_reader(self, tmp_path: Path) -> JournalReadPort:
        return JournalReader.open(tmp_path / JOURNAL)

    def verify_journal(self, tmp_path: Path, journal: JournalPort) -> None:
        assert isinstance(journal, Journal)
        assert journal.node_key is not None
        report = verify(journal, trusted_public_key=journal.node_key.public_key)
        assert report.ok, report.fault


class TestPostgresJournalConformance(JournalConformance):
    """The same suite on the PostgreSQL journal, four shard chains (a database per test on the
    session's throwaway server)."""

    shards = 4
    signs_checkpoints = False

    @pytest.fixture(autouse=True)
    def _server(self, postgres: PostgresServer) -> None:
        self.server = postgres
        self.databases: dict[Path, str] = {}

    def dsn(self, tmp_path: Path) -> str:
        if tmp_path not in self.databases:
            self.databases[tmp_path] = dsn = self.server.database()
            initialise(dsn, self.shards)
        return self.databases[tmp_path]

    def make_journal(self, tmp_path: Path) -> JournalPort:
        return PostgresJournal(self.dsn(tmp_path))

    def make_reader(self, tmp_path: Path) -> JournalReadPort:
        return PostgresReader(self.dsn(tmp_path))

    def verify_journal(self, tmp_path: Path, journal: JournalPort) -> None:
        report = verify_database(self.dsn(tmp_path))
        assert report.ok, report.fault
