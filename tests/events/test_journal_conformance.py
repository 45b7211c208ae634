"""The SQLite journal (:class:`events.Journal`, :class:`events.JournalReader`) against the
journal port's conformance suite, plus what only SQLite offers: ``reel journal verify``."""

from __future__ import annotations

from pathlib import Path

from events import Journal, JournalPort, JournalReader, JournalReadPort, NodeKey, verify
from tests.events.journal_conformance import JournalConformance
from tests.events.journal_testkit import JOURNAL, KEY


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
