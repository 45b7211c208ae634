"""The one writer of a stream, and :class:`Recorded`: an event as the journal holds it.

Every stream has exactly one writing actor. It states the ``stream_seq`` it expects from its
own folded state (``state.next_seq``), never by asking the journal, so a second writer is refused
with a ``ConcurrencyConflict`` instead of interleaving silently.

Actors fold what the journal *stores*: events are redacted here, before the append (redaction is
idempotent, so the journal's own pass finds nothing left), and come back with the commit time.
A live actor and a recovery that reads the journal after a crash therefore fold identical input.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from events import Event, JournalPort, StoredEvent


class Recorded(msgspec.Struct, frozen=True):
    """One event as stored: the redacted event, its stream, its commit time and who caused it.

    The one input of every aggregate's fold (:mod:`actors.aggregate`): a live writer builds it
    from its own append, recovery from the journal's row, so both fold the same values."""

    event: Event
    stream: str
    at_ms: int
    principal: str = ""
    """The principal the envelope names (what a fold reads as "who did this"); a writer that
    builds a record of its own append always sets it."""

    @classmethod
    def of(cls, stored: StoredEvent) -> Recorded:
        """A journal row, decoded."""
        return cls(stored.decode(), stored.stream, stored.recorded_at_ms, stored.principal)


def recorded(rows: Iterable[StoredEvent]) -> list[Recorded]:
    """Journal rows, decoded, in the order given."""
    return [Recorded.of(row) for row in rows]


class OwnedStream:
    """A stream and the envelope fields every append to it carries."""

    def __init__(
        self,
        journal: JournalPort,
        name: str,
        *,
        principal: str,
        correlation_id: str | None,
        causation_id: str | None,
        home: str | None = None,
    ) -> None:
        self.journal = journal
        self.name = name
        self.principal = principal
        self.correlation_id = correlation_id
        self.causation_id = causation_id
        self.home = home
        """The session the stream belongs to, if any: where a sharded journal places it."""

    def append(
        self, expected_seq: int, *events: Event, principal: str | None = None
    ) -> list[Recorded]:
        """Append ``events`` atomically at ``expected_seq``; returns them as stored.
        ``principal`` overrides the stream's for this append: whoever caused these events (a
        canceller, an approver) rather than whom the stream acts for."""
        who = principal or self.principal
        result = self.journal.append(
            self.name,
            events,
            expected_seq=expected_seq,
            principal=who,
            correlation_id=self.correlation_id,
            causation_id=self.causation_id,
            home=self.home,
        )
        # As the journal stored them (redacted there, once), so the fold holds what it holds.
        return [Recorded(event, self.name, result.recorded_at_ms, who) for event in result.events]
