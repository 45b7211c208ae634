"""Output coalescing: streamed deltas become chunk events of at most ~16 words or 50 ms."""

from __future__ import annotations


class Coalescer:
    """Collects deltas; says when a chunk is due. Pure: the caller supplies the clock."""

    def __init__(self, max_words: int, max_age_s: float) -> None:
        self.max_words = max_words
        self.max_age_s = max_age_s
        self._parts: list[str] = []
        self._words = 0
        self._since: float | None = None

    def add(self, text: str, now: float) -> str | None:
        """Add a delta; returns a chunk when the buffer reached the word or age limit."""
        if not text:
            return None
        if self._since is None:
            self._since = now
        self._parts.append(text)
        self._words += len(text.split())
        if self._words >= self.max_words or now - self._since >= self.max_age_s:
            return self.flush()
        return None

    def due(self, now: float) -> bool:
        """Whether buffered text is older than the age limit."""
        return self._since is not None and now - self._since >= self.max_age_s

    def flush(self) -> str | None:
        """Everything buffered, or None when empty."""
        if not self._parts:
            return None
        text = "".join(self._parts)
        self._parts.clear()
        self._words = 0
        self._since = None
        return text
