"""Output coalescing: a turn's streamed text becomes chunk events of at most ~16 words or 50 ms,
redacted as one text before any of it is chunked.

The provider's deltas go through a :class:`events.redaction.redact_stream.StreamRedactor` first: it
holds back what could still be part of a secret (a token, a key and its value, a private key block)
and releases text whose verdict is final, exactly as :func:`events.redaction.redact.redact_text`
would redact the whole turn. Only released text is coalesced into chunks, so a chunk boundary can
never split a secret, and the chunks joined are the turn's text redacted: the final answer,
the tape and every stream built from it show the same text.
"""

from __future__ import annotations

from typing import NamedTuple

from events.redaction.redact_stream import StreamRedactor


class Chunk(NamedTuple):
    """One ``run.output`` worth of redacted text, and how many secrets it replaced."""

    text: str
    redacted: int


class Coalescer:
    """Redacts and collects deltas; says when a chunk is due. Pure: the caller supplies the
    clock. One per run; :meth:`end_turn` releases what the redactor still holds."""

    def __init__(self, max_words: int, max_age_s: float) -> None:
        self.max_words = max_words
        self.max_age_s = max_age_s
        self.redactor = StreamRedactor()
        self._parts: list[str] = []
        self._redacted = 0
        self._words = 0
        self._since: float | None = None

    def add(self, text: str, now: float) -> Chunk | None:
        """Add a delta; returns a chunk when the buffer reached the word or age limit."""
        released, redacted = self.redactor.feed(text)
        return self._collect(released, redacted, now)

    def tick(self, now: float) -> Chunk | None:
        """The flush timer: take what the redactor can release now; a chunk when due."""
        released, redacted = self.redactor.release()
        chunk = self._collect(released, redacted, now)
        if chunk is None and self.due(now):
            chunk = self.flush()
        return chunk

    def end_turn(self, now: float) -> Chunk | None:
        """The provider finished the turn: everything held, redacted, and buffered, as one
        last chunk (None when there is nothing)."""
        released, redacted = self.redactor.finish()
        if released:
            self._parts.append(released)
            self._redacted += redacted
        return self.flush()

    def _collect(self, text: str, redacted: int, now: float) -> Chunk | None:
        if not text:
            return None
        if self._since is None:
            self._since = now
        self._parts.append(text)
        self._redacted += redacted
        self._words += len(text.split())
        if self._words >= self.max_words or now - self._since >= self.max_age_s:
            return self.flush()
        return None

    @property
    def buffered(self) -> bool:
        """Whether released text waits to be chunked."""
        return bool(self._parts)

    @property
    def pending(self) -> bool:
        """Whether text waits, chunked or held by the redactor (a flush timer is worth
        running)."""
        return bool(self._parts) or self.redactor.held > 0

    def due(self, now: float) -> bool:
        """Whether buffered text is older than the age limit."""
        return self._since is not None and now - self._since >= self.max_age_s

    def flush(self) -> Chunk | None:
        """Everything buffered (released by the redactor), or None when empty."""
        if not self._parts:
            return None
        chunk = Chunk("".join(self._parts), self._redacted)
        self._parts.clear()
        self._redacted = 0
        self._words = 0
        self._since = None
        return chunk

    def drop(self) -> None:
        """Forget the turn: what is buffered or held is never recorded (a stopped turn)."""
        self.flush()
        self.redactor.reset()
