"""The context assembler: the one place a run's model input is built.

``model_input`` turns folded state into the messages a provider sees: the system prompt, the
session's prior turns, the run's message, and for every turn that proposed tool calls the
assistant message and the tool results. Live runs and runs resumed after a restart call it with
the same folded state, so they give the model the same input.

**The model sees what the journal holds.** Message text, earlier answers, tool arguments and
tool results reach the model as stored, that is redacted: a secret a user pastes is replaced by
the marker before any model sees it, and a resumed run's input is byte-for-byte the input the
live run would have built. (So the model is never handed a secret by reel; and an auditor can
rebuild from the journal exactly what each turn was shown.)

Prior turns come from a node-wide :class:`TurnCache` (user text and final answer per run), so
a session that wakes after passivation does not re-read its history from the journal.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from actors.provider import ChatMessage
from actors.run_fold import RunState
from events import JournalReadPort
from events.catalog import RunAccepted, RunCompleted, ToolCompleted
from events.lifecycle import is_terminal

MAX_PRIOR_RUNS = 20
"""Only the most recent prior runs are replayed to the model."""
TURN_CACHE_RUNS = 50_000
"""How many runs' (text, answer) pairs the node keeps in memory (least recently used dropped)."""
CUT_NOTE = "\n[cut for the model]"


def tool_content(completed: ToolCompleted) -> str:
    """What the model is told about a finished tool call."""
    if completed.ok:
        return completed.output + ("\n[output truncated]" if completed.truncated else "")
    return f"error ({completed.error_kind}): {completed.error}"


def model_input(
    system_prompt: str,
    prior: tuple[ChatMessage, ...],
    state: RunState,
    tool_result_max_chars: int,
) -> tuple[ChatMessage, ...]:
    """The messages for the run's next provider call."""
    messages = [
        ChatMessage(role="system", content=system_prompt),
        *prior,
        ChatMessage(role="user", content=state.text),
    ]
    for turn in state.turns:
        if not turn.calls:
            continue
        messages.append(ChatMessage(role="assistant", content=turn.text, tool_calls=turn.calls))
        for call in turn.calls:
            done = state.result_of(call.id)
            if done is None:
                continue
            content = tool_content(done)
            if len(content) > tool_result_max_chars:
                content = content[:tool_result_max_chars] + CUT_NOTE
            messages.append(
                ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)
            )
    return tuple(messages)


class _Turn:
    __slots__ = ("answer", "finished", "text")

    def __init__(self, text: str | None, answer: str | None, finished: bool) -> None:
        self.text = text
        self.answer = answer
        self.finished = finished


class TurnCache:
    """User text and final answer (as stored) of recent runs, by run id; thread-safe."""

    def __init__(self, capacity: int = TURN_CACHE_RUNS) -> None:
        self._capacity = capacity
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        self._lock = threading.Lock()

    def _put(self, run_id: str, turn: _Turn) -> None:
        with self._lock:
            self._turns[run_id] = turn
            self._turns.move_to_end(run_id)
            if len(self._turns) > self._capacity:
                self._turns.popitem(last=False)

    def accepted(self, run_id: str, text: str) -> None:
        """A run was accepted with ``text`` (as stored)."""
        self._put(run_id, _Turn(text, None, False))

    def finished(self, run_id: str, text: str, answer: str | None) -> None:
        """A run ended; ``answer`` (as stored) when it completed."""
        self._put(run_id, _Turn(text, answer, True))

    def prior(self, reader: JournalReadPort, history: tuple[str, ...]) -> tuple[ChatMessage, ...]:
        """The user/assistant pairs of the completed runs among the last ``history`` runs."""
        messages: list[ChatMessage] = []
        for run_id in history[-MAX_PRIOR_RUNS:]:
            with self._lock:
                turn = self._turns.get(run_id)
                if turn is not None:
                    self._turns.move_to_end(run_id)
            if turn is None or not turn.finished:
                turn = _load(reader, run_id)
                self._put(run_id, turn)
            if turn.text is not None and turn.answer is not None:
                messages.append(ChatMessage(role="user", content=turn.text))
                messages.append(ChatMessage(role="assistant", content=turn.answer))
        return tuple(messages)


def _load(reader: JournalReadPort, run_id: str) -> _Turn:
    text: str | None = None
    answer: str | None = None
    ended = False
    for stored in reader.read_correlated(run_id):
        if stored.kind == "run.accepted":
            event = stored.decode()
            assert isinstance(event, RunAccepted)
            text = event.text
        elif is_terminal(stored.kind):
            ended = True
            done = stored.decode()
            if isinstance(done, RunCompleted):
                answer = done.answer
    return _Turn(text, answer, ended)


def prior_of(history: tuple[str, ...], run_id: str) -> tuple[str, ...]:
    """The runs of a session's visible ``history`` that come before ``run_id``."""
    return history[: history.index(run_id)] if run_id in history else history
