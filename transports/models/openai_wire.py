"""The OpenAI chat-completions wire format: request bodies out, stream chunks in.

Pure translation, no I/O: :func:`encode_request` builds the JSON body of
``POST /chat/completions``; :class:`StreamAssembler` turns the ``data`` payloads of the SSE
stream into provider events (text deltas as they come, tool calls once complete, one usage, one
turn end); :func:`decode_completion` does the same for a whole, non-streamed completion (for
servers that report usage only there, such as llama-cpp-python's); :func:`error_message` pulls
the server's explanation out of an error body. Tool
names are mapped through a :class:`~transports.models.tool_names.ToolNameMap` both ways.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

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
from transports.models.tool_names import ToolNameMap

__all__ = ["StreamAssembler", "decode_completion", "encode_request", "error_message"]

_MAX_ERROR_TEXT = 300


def _encode_message(message: ChatMessage, names: ToolNameMap) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content,
        }
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": names.to_wire(call.name), "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def encode_request(
    request: ProviderRequest, model: str, names: ToolNameMap, *, stream: bool = True
) -> dict[str, Any]:
    """The JSON body for a chat completion of ``request`` (streamed unless ``stream=False``).

    ``model`` is used when the request names none. Tool names are written through ``names``,
    which must be the table the response will be decoded with.
    """
    body: dict[str, Any] = {
        "model": request.model or model,
        "messages": [_encode_message(m, names) for m in request.messages],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": names.to_wire(tool.name),
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    return body


class _FunctionDelta(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _UsageWire(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ErrorWire(msgspec.Struct):
    message: str | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _UsageWire | None = None
    error: _ErrorWire | str | None = None


class _ErrorBody(msgspec.Struct):
    error: _ErrorWire | str | None = None
    detail: str | None = None
    message: str | None = None


class _FunctionWire(msgspec.Struct):
    name: str = ""
    arguments: str = ""


class _ToolCallWire(msgspec.Struct):
    id: str | None = None
    function: _FunctionWire | None = None


class _MessageWire(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallWire] | None = None


class _FullChoice(msgspec.Struct):
    index: int = 0
    message: _MessageWire | None = None
    finish_reason: str | None = None


class _Completion(msgspec.Struct):
    choices: list[_FullChoice] | None = None
    usage: _UsageWire | None = None
    error: _ErrorWire | str | None = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_completion_decoder = msgspec.json.Decoder(_Completion)
_error_decoder = msgspec.json.Decoder(_ErrorBody)


def _clip(text: str) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > _MAX_ERROR_TEXT:
        return text[: _MAX_ERROR_TEXT - 3] + "..."
    return text


def error_message(body: bytes) -> str:
    """The server's explanation in an error response body, short and on one line.

    Understands ``{"error": {"message": ...}}`` (OpenAI), ``{"error": "..."}``, ``{"detail":
    ...}`` and ``{"message": ...}``; anything else is shown as (clipped) text.
    """
    try:
        parsed = _error_decoder.decode(body)
    except msgspec.DecodeError:
        return _clip(body.decode("utf-8", errors="replace")) or "(empty body)"
    if isinstance(parsed.error, _ErrorWire) and parsed.error.message:
        return _clip(parsed.error.message)
    if isinstance(parsed.error, str) and parsed.error:
        return _clip(parsed.error)
    for text in (parsed.detail, parsed.message):
        if text:
            return _clip(text)
    return _clip(body.decode("utf-8", errors="replace")) or "(empty body)"


def _usage(wire: _UsageWire) -> Usage:
    return Usage(
        prompt_tokens=wire.prompt_tokens or 0, completion_tokens=wire.completion_tokens or 0
    )


def _error_text(error: _ErrorWire | str) -> str:
    return _clip(error if isinstance(error, str) else error.message or "")


def decode_completion(body: bytes, names: ToolNameMap) -> list[ProviderEvent]:
    """The events of a whole (non-streamed) ``chat.completion`` response body."""
    try:
        completion = _completion_decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise ProviderError(
            f"provider sent a malformed completion ({exc}): {_clip(body.decode(errors='replace'))}",
            retryable=True,
        ) from None
    if completion.error is not None:
        raise ProviderError(f"provider reported an error: {_error_text(completion.error)}")
    choice = next((c for c in completion.choices or () if c.index == 0), None)
    if choice is None or choice.finish_reason is None:
        raise ProviderError("provider completion has no finished choice", retryable=True)
    events: list[ProviderEvent] = []
    message = choice.message or _MessageWire()
    if message.content:
        events.append(TextDelta(text=message.content))
    for call in message.tool_calls or ():
        function = call.function or _FunctionWire()
        events.append(
            ToolCall(
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=names.from_wire(function.name),
                arguments=function.arguments,
            )
        )
    if completion.usage is not None:
        events.append(_usage(completion.usage))
    events.append(TurnEnd(finish_reason=choice.finish_reason))
    return events


class _PartialCall:
    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments = ""


class StreamAssembler:
    """Folds stream payloads into provider events for one response.

    Feed it the ``data`` of each SSE event with :meth:`feed`; it returns text deltas at once
    and complete tool calls when the choice finishes. :attr:`done` turns true at ``[DONE]``.
    :meth:`finish` returns the closing usage and turn end, or raises when the stream ended
    before the server said why it finished.
    """

    def __init__(self, names: ToolNameMap) -> None:
        self._names = names
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None
        self._finish_reason: str | None = None
        self.done = False

    def feed(self, data: str) -> list[ProviderEvent]:
        """Events carried by one SSE ``data`` payload."""
        if data.strip() == "[DONE]":
            self.done = True
            return []
        try:
            chunk = _chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"provider sent a malformed stream chunk ({exc}): {_clip(data)}", retryable=True
            ) from None
        if chunk.error is not None:
            raise ProviderError(
                f"provider reported an error mid-stream: {_error_text(chunk.error)}"
            )
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage)
        events: list[ProviderEvent] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    events.append(TextDelta(text=delta.content))
                for fragment in delta.tool_calls or ():
                    self._absorb(fragment)
            if choice.finish_reason:
                self._finish_reason = choice.finish_reason
                events.extend(self._complete_calls())
        return events

    def finish(self) -> list[ProviderEvent]:
        """The closing events, once the stream is over."""
        if self._finish_reason is None:
            raise ProviderError(
                "provider stream ended before a finish reason was sent", retryable=True
            )
        events: list[ProviderEvent] = self._complete_calls()
        if self._usage is not None:
            events.append(self._usage)
        events.append(TurnEnd(finish_reason=self._finish_reason))
        return events

    def _absorb(self, fragment: _ToolCallDelta) -> None:
        call = self._calls.setdefault(fragment.index, _PartialCall())
        if fragment.id:
            call.id = fragment.id
        if fragment.function is not None:
            if fragment.function.name:
                call.name += fragment.function.name
            if fragment.function.arguments:
                call.arguments += fragment.function.arguments

    def _complete_calls(self) -> list[ProviderEvent]:
        events: list[ProviderEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            events.append(
                ToolCall(
                    id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                    name=self._names.from_wire(call.name),
                    arguments=call.arguments,
                )
            )
        self._calls.clear()
        return events
