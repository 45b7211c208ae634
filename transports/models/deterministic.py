"""The deterministic provider: reel's embedded default model — offline and reproducible.

It answers by echoing the user's text, and proposes tool calls when the message asks for them,
so every path of the agent loop (tools, approvals, denials, budgets, cancellation, provider
errors) runs without a network or a real model. The same request always gives the same stream.

Directives, one per line, read from the latest ``user`` message (other lines are plain text)::

    /tool NAME JSON       propose a call of NAME with JSON as its arguments (JSON defaults to {});
                          several lines propose several calls in one turn. Invalid JSON is passed
                          through verbatim, so the run's refusal of it can be exercised.
    /tool-loop NAME JSON  propose this call on every turn, forever (exercises max_turns and
                          max_tool_calls budgets).
    /sleep MS             wait MS milliseconds before answering, on every turn (cancellable;
                          exercises cancellation and wall-clock limits). Several lines add up.
    /fail [MESSAGE]       raise a non-retryable ProviderError on the first turn.

Turns:

- The last message is the user's: propose its ``/tool`` and ``/tool-loop`` calls with no text
  (finish ``tool_calls``); with none, echo the plain text (finish ``stop``).
- Otherwise (tool results came back): propose the ``/tool-loop`` calls again if there are any;
  else answer the plain text followed by one line per tool result since the user's message,
  ``NAME -> CONTENT``, and finish ``stop``.
- An answer with no plain text and no tool results is ``ack``.

Call ids are ``call_1``, ``call_2``, ... numbered across the conversation (the count of calls
already in assistant messages, plus one), so they are unique within it. Text is streamed one
word at a time (each delta is a word with the whitespace after it), with an optional delay per
delta. ``max_tokens`` cuts the answer to that many words and finishes ``length``. Usage:
``prompt_tokens`` is the number of whitespace-separated words in all message contents of the
request; ``completion_tokens`` the number of words produced (the calls' names and arguments for
a tool-call turn), at least 1.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import re
from collections.abc import AsyncGenerator, Sequence

import msgspec

from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    TurnEnd,
    Usage,
)
from actors.runs.context import PREAMBLE

__all__ = ["DeterministicProvider", "ProposedCall", "Script", "parse_script"]

_WORD = re.compile(r"\S+\s*")
_DEFAULT_FAILURE = "deterministic provider failure (/fail)"


class ProposedCall(msgspec.Struct, frozen=True):
    """A ``/tool`` or ``/tool-loop`` line: the tool's name and its raw argument text."""

    name: str
    arguments: str


class Script(msgspec.Struct, frozen=True):
    """What a user message asks of the deterministic provider."""

    text: str = ""
    calls: tuple[ProposedCall, ...] = ()
    loop_calls: tuple[ProposedCall, ...] = ()
    sleep_ms: int = 0
    fail: str | None = None


def _bad_directive(number: int, problem: str) -> ProviderError:
    return ProviderError(f"deterministic provider: line {number}: {problem}", retryable=False)


def parse_script(content: str) -> Script:
    """Split a user message into directives and plain text; a malformed directive raises."""
    plain: list[str] = []
    calls: list[ProposedCall] = []
    loop_calls: list[ProposedCall] = []
    sleep_ms = 0
    fail: str | None = None
    for number, line in enumerate(content.splitlines(), start=1):
        parts = line.strip().split(maxsplit=2)
        directive = parts[0] if parts else ""
        if directive in ("/tool", "/tool-loop"):
            if len(parts) < 2:
                usage = f"{directive} NAME JSON"
                raise _bad_directive(number, f"{directive} needs a tool name: {usage}")
            call = ProposedCall(name=parts[1], arguments=parts[2] if len(parts) > 2 else "{}")
            (calls if directive == "/tool" else loop_calls).append(call)
        elif directive == "/sleep":
            value = line.strip().split(maxsplit=1)[1:]
            if len(value) != 1 or not value[0].isdecimal():
                got = line.strip()
                raise _bad_directive(number, f"/sleep needs whole milliseconds, got {got!r}")
            sleep_ms += int(value[0])
        elif directive == "/fail":
            message = line.strip().removeprefix("/fail").strip()
            fail = message or _DEFAULT_FAILURE
        else:
            plain.append(line)
    return Script(
        text="\n".join(plain).strip(),
        calls=tuple(calls),
        loop_calls=tuple(loop_calls),
        sleep_ms=sleep_ms,
        fail=fail,
    )


_CONTENT = operator.attrgetter("content")
_TOOL_CALLS = operator.attrgetter("tool_calls")


@functools.lru_cache(maxsize=8192)
def _word_count(text: str) -> int:
    """Words of ``text``, remembered: a session's every turn sends its earlier messages again
    (the same strings), and this provider stands in for a remote model, whose reading of the
    prompt costs the node nothing; counting them afresh was a tenth of a run's CPU."""
    return len(text.split())


def _tool_name(result: ChatMessage, history: Sequence[ChatMessage]) -> str:
    if result.name:
        return result.name
    for message in history:
        for call in message.tool_calls:
            if call.id == result.tool_call_id:
                return call.name
    return "tool"


class DeterministicProvider:
    """A :class:`~actors.provider.ModelProvider` that needs no model; see the module docstring."""

    def __init__(self, *, chunk_delay_s: float = 0.0, name: str = "deterministic") -> None:
        if chunk_delay_s < 0:
            raise ValueError(f"chunk_delay_s: must be 0 or more, got {chunk_delay_s}")
        self.name = name
        self._chunk_delay_s = chunk_delay_s

    async def aclose(self) -> None:
        """Nothing to release."""

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        """Stream the deterministic answer to ``request``."""
        messages = request.messages
        # The last user message, found from the end: a long session sends hundreds before it.
        user_at = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), -1
        )
        # Only the person's own words script the answer: reference material appended to the
        # message (memory, files, pages: actors/runs/context.py) is data, never directives.
        said = messages[user_at].content.split("\n\n" + PREAMBLE, 1)[0] if user_at >= 0 else ""
        script = parse_script(said) if user_at >= 0 else Script()
        since_user = messages[user_at + 1 :]
        first_turn = not since_user
        # Counted by C-level iteration (map, attrgetter, the cache's lookup): every turn of a
        # long session sends hundreds of earlier messages again, and a remote model's reading of
        # them costs the node nothing.
        prompt_tokens = sum(map(_word_count, map(_CONTENT, messages)))

        if script.sleep_ms:
            await asyncio.sleep(script.sleep_ms / 1000)
        if first_turn and script.fail is not None:
            raise ProviderError(script.fail, retryable=False)

        proposed = script.calls + script.loop_calls if first_turn else script.loop_calls
        if proposed:
            # Only assistant messages carry calls; counted in C over a long session's history.
            already = sum(map(len, map(_TOOL_CALLS, messages)))
            words = 0
            for number, call in enumerate(proposed, start=already + 1):
                words += _word_count(f"{call.name} {call.arguments}")
                yield ToolCall(id=f"call_{number}", name=call.name, arguments=call.arguments)
            yield Usage(prompt_tokens=prompt_tokens, completion_tokens=max(1, words))
            yield TurnEnd(finish_reason="tool_calls")
            return

        lines = [script.text] if script.text else []
        if not first_turn:
            results = [m for m in since_user if m.role == "tool"]
            lines += [f"{_tool_name(m, since_user)} -> {m.content}" for m in results]
        chunks = _WORD.findall("\n".join(lines) or "ack")
        finish = "stop"
        if request.max_tokens is not None and len(chunks) > request.max_tokens:
            chunks = chunks[: max(0, request.max_tokens)]
            finish = "length"
        for chunk in chunks:
            if self._chunk_delay_s:
                await asyncio.sleep(self._chunk_delay_s)
            yield TextDelta(text=chunk)
        yield Usage(prompt_tokens=prompt_tokens, completion_tokens=max(1, len(chunks)))
        yield TurnEnd(finish_reason=finish)
