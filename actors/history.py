"""Model input assembly: system prompt, prior turns of the session, the new message.

A session keeps its recent turns in a :class:`TurnCache` so a run does not re-read them from the
journal; after a wake-up the cache fills itself from the journal on first use. Texts and answers
are the redacted ones (as stored), so the model sees the same history before and after a
passivation or a restart.
"""

from __future__ import annotations

from actors.provider import ChatMessage
from events import JournalReader
from events.catalog import RunAccepted, RunCompleted
from events.redact import redact_text

MAX_PRIOR_RUNS = 20
"""Only the most recent prior runs are replayed to the model."""


class _Turn:
    __slots__ = ("answer", "finished", "text")

    def __init__(self, text: str | None, answer: str | None, finished: bool) -> None:
        self.text = text
        self.answer = answer
        self.finished = finished


class TurnCache:
    """User text and final answer of a session's runs, by run id."""

    def __init__(self) -> None:
        self._turns: dict[str, _Turn] = {}

    def accepted(self, run_id: str, text: str) -> None:
        """A run was accepted with ``text`` (as given: it is redacted here)."""
        self._turns[run_id] = _Turn(redact_text(text)[0], None, False)

    def finished(self, run_id: str, answer: str | None) -> None:
        """A run ended; ``answer`` is its final answer when it completed."""
        turn = self._turns.get(run_id)
        text = turn.text if turn is not None else None
        clean = redact_text(answer)[0] if answer is not None else None
        self._turns[run_id] = _Turn(text, clean, True)

    def prior(self, reader: JournalReader, history: tuple[str, ...]) -> tuple[ChatMessage, ...]:
        """The user/assistant pairs of the completed runs among the last ``history`` runs."""
        messages: list[ChatMessage] = []
        for run_id in history[-MAX_PRIOR_RUNS:]:
            turn = self._turns.get(run_id)
            if turn is None or not turn.finished or turn.text is None:
                turn = _load(reader, run_id)
                self._turns[run_id] = turn
            if turn.text is not None and turn.answer is not None:
                messages.append(ChatMessage(role="user", content=turn.text))
                messages.append(ChatMessage(role="assistant", content=turn.answer))
        return tuple(messages)


def _load(reader: JournalReader, run_id: str) -> _Turn:
    text: str | None = None
    answer: str | None = None
    ended = False
    for stored in reader.read_correlated(run_id):
        if stored.kind == "run.accepted":
            event = stored.decode()
            assert isinstance(event, RunAccepted)
            text = event.text
        elif stored.kind == "run.completed":
            done = stored.decode()
            assert isinstance(done, RunCompleted)
            answer = done.answer
            ended = True
        elif stored.kind in ("run.failed", "run.cancelled"):
            ended = True
    return _Turn(text, answer, ended)


def prior_turns(reader: JournalReader, history: tuple[str, ...]) -> tuple[ChatMessage, ...]:
    """The prior turns of ``history`` read from the journal alone."""
    return TurnCache().prior(reader, history)


def model_input(system_prompt: str, prior: tuple[ChatMessage, ...], text: str) -> list[ChatMessage]:
    """The full message list for a run's first turn."""
    return [
        ChatMessage(role="system", content=system_prompt),
        *prior,
        ChatMessage(role="user", content=text),
    ]
