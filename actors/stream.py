"""The one writer of a stream: appends stating the ``stream_seq`` it expects.

Every stream has exactly one writing actor. It knows its stream's next seq from its own appends
(or from the journal when it resumes), so a second writer would be refused with a
``ConcurrencyConflict`` instead of interleaving silently.
"""

from __future__ import annotations

from events import Event, Journal


class OwnedStream:
    """A stream and the envelope fields every append to it carries."""

    def __init__(
        self,
        journal: Journal,
        name: str,
        *,
        principal: str,
        correlation_id: str | None,
        causation_id: str | None,
        next_seq: int = 0,
    ) -> None:
        self.journal = journal
        self.name = name
        self.principal = principal
        self.correlation_id = correlation_id
        self.causation_id = causation_id
        self.next_seq = next_seq

    def append(self, *events: Event) -> None:
        """Append ``events`` atomically after the ones this writer already appended."""
        result = self.journal.append(
            self.name,
            events,
            expected_seq=self.next_seq,
            principal=self.principal,
            correlation_id=self.correlation_id,
            causation_id=self.causation_id,
        )
        self.next_seq = result.next_seq
