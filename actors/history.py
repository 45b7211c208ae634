"""Model input assembly: system prompt, prior turns of the session, the new message."""

from __future__ import annotations

from actors.provider import ChatMessage
from events import JournalReader
from events.catalog import RunAccepted, RunCompleted

MAX_PRIOR_RUNS = 20
"""Only the most recent prior runs are replayed to the model."""


def prior_turns(reader: JournalReader, history: tuple[str, ...]) -> list[ChatMessage]:
    """User/assistant message pairs for the completed runs in ``history`` (oldest first).

    Runs that did not complete contribute nothing: a half-answered turn would mislead the model.
    Texts come from the journal, so they are the redacted ones.
    """
    messages: list[ChatMessage] = []
    for run_id in history[-MAX_PRIOR_RUNS:]:
        text: str | None = None
        answer: str | None = None
        for stored in reader.read_correlated(run_id):
            if stored.kind == "run.accepted":
                event = stored.decode()
                assert isinstance(event, RunAccepted)
                text = event.text
            elif stored.kind == "run.completed":
                event = stored.decode()
                assert isinstance(event, RunCompleted)
                answer = event.answer
        if text is not None and answer is not None:
            messages.append(ChatMessage(role="user", content=text))
            messages.append(ChatMessage(role="assistant", content=answer))
    return messages


def model_input(
    reader: JournalReader, system_prompt: str, history: tuple[str, ...], text: str
) -> list[ChatMessage]:
    """The full message list for a run's first turn."""
    return [
        ChatMessage(role="system", content=system_prompt),
        *prior_turns(reader, history),
        ChatMessage(role="user", content=text),
    ]
