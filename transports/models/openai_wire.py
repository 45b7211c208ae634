"""The OpenAI chat-completions wire format: request bodies out, stream chunks in.

Pure translation, no I/O: :func:`encode_request` builds the JSON body of
``POST /chat/completions`` (:func:`check_options` validates what an operator may add to it);
:class:`StreamAssembler` turns the ``data`` payloads of the SSE stream into provider events (text
deltas as they come, tool calls once complete, one usage, one turn end); :func:`decode_completion`
does the same for a whole, non-streamed completion (for servers that report usage only there,
such as llama-cpp-python's); :func:`error_message` pulls the server's explanation out of an error
body. Tool names are mapped through a :class:`~transports.models.tool_names.ToolNameMap` both
ways.

What the servers people run send differently, and what is done about it here, is the table
"Known server differences" in docs/providers.md; each row has a wire-level test.
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

__all__ = [
    "OWN_FIELDS",
    "TOOL_CHOICES",
    "StreamAssembler",
    "check_options",
    "decode_completion",
    "encode_request",
    "error_message",
    "forced_choice",
]

_MAX_ERROR_TEXT = 300

TOOL_CHOICES = ("auto", "required", "none")
"""The ``tool_choice`` keywords; any other value names the one tool the model must call."""
OWN_FIELDS = frozenset(
    [
        "model",
        "messages",
        "stream",
        "stream_options",
        "tools",
        "tool_choice",
        "max_tokens",
        "temperature",
    ]
)
"""Request fields reel writes itself: ``extra_body`` may not set them."""
_TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def check_options(
    *,
    max_tokens: int | None,
    temperature: float | None,
    tool_choice: str | None,
    extra_body: dict[str, Any],
) -> None:
    """Raise ``ValueError("<field>: <problem>")`` for a value no request may carry.

    ``tool_choice``: ``auto``, ``required``, ``none`` or a tool's catalog name (``fs.read``).
    ``extra_body`` may not name a field of :data:`OWN_FIELDS`: reel's conversation, tools and
    model are never overridden from configuration.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens: must be 1 or more, got {max_tokens}")
    if temperature is not None and not 0 <= temperature <= 2:
        raise ValueError(f"temperature: must be between 0 and 2, got {temperature}")
    if tool_choice is not None and not (
        tool_choice in TOOL_CHOICES or _TOOL_NAME.fullmatch(tool_choice)
    ):
        raise ValueError(
            f"tool_choice: must be {', '.join(TOOL_CHOICES)} or a tool name, got {tool_choice!r}"
        )
    taken = sorted(OWN_FIELDS.intersection(extra_body))
    if taken:
        raise ValueError(
            f"extra_body: may not set {', '.join(taken)}: reel writes "
            f"{', '.join(sorted(OWN_FIELDS))} itself (model, stream, max_tokens, temperature and "
            "tool_choice have [provider] keys of their own)"
        )


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
            # A string, never null: llama-cpp-python refuses null beside tool_calls (500), and
            # its templates fail on an absent one; "" reads as no text everywhere.
            "content": message.content,
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


def forced_choice(
    choice: str | None, request: ProviderRequest, names: ToolNameMap
) -> str | dict[str, Any] | None:
    """The wire ``tool_choice`` for ``request``, or None to send none.

    Only with tools. A choice that forces a call (``required``, a tool's name) applies to a turn
    that answers the person; a turn that follows tool results sends none (the server's default,
    ``auto`` on OpenAI), or the run could never give its answer.
    """
    if choice is None or not request.tools:
        return None
    if choice in ("auto", "none"):
        return choice
    if request.messages and request.messages[-1].role == "tool":
        return None
    if choice == "required":
        return choice
    if choice not in {tool.name for tool in request.tools}:
        raise ProviderError(f"tool_choice names {choice!r}, a tool this request does not offer")
    return {"type": "function", "function": {"name": names.to_wire(choice)}}


def encode_request(
    request: ProviderRequest,
    model: str,
    names: ToolNameMap,
    *,
    stream: bool = True,
    max_tokens: int | None = None,
    temperature: float | None = None,
    tool_choice: str | None = None,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON body for a chat completion of ``request`` (streamed unless ``stream=False``).

    ``model`` is used when the request names none, ``max_tokens`` when it sets no limit of its
    own. ``tool_choice`` is applied as :func:`forced_choice` says. ``extra_body`` (checked by
    :func:`check_options`) is merged in under reel's own fields, which win. Tool names are
    written through ``names``, which must be the table the response will be decoded with.
    """
    extra = {k: v for k, v in (extra_body or {}).items() if k not in OWN_FIELDS}
    body: dict[str, Any] = {
        **extra,
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
    choice = forced_choice(tool_choice, request, names)
    if choice is not None:
        body["tool_choice"] = choice
    limit = request.max_tokens if request.max_tokens is not None else max_tokens
    if limit is not None:
        body["max_tokens"] = limit
    if temperature is not None:
        body["temperature"] = temperature
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


class _PromptDetailsWire(msgspec.Struct):
    cached_tokens: int | None = None


class _UsageWire(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptDetailsWire | None = None


class _ErrorWire(msgspec.Struct):
    message: str | None = None


class _Chunk(msgspec.Struct):
    model: str | None = None
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
    model: str | None = None
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


def _usage(wire: _UsageWire, model: str | None) -> Usage:
    details = wire.prompt_tokens_details
    return Usage(
        prompt_tokens=wire.prompt_tokens or 0,
        completion_tokens=wire.completion_tokens or 0,
        cached_tokens=(details.cached_tokens or 0) if details is not None else 0,
        model=model or "",
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
        events.append(_usage(completion.usage, completion.model))
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

    Tool-call fragments are assembled by ``index``, as OpenAI sends them: the first fragment of
    a call carries its id and name, the others pieces of its arguments. Two departures are
    read as the servers mean them: a fragment repeating the call's complete name (and id) is a
    repeat, not more of the name (llama-cpp-python sends both in every fragment); a fragment
    with another id at an index already in use starts a new call (Ollama sends every call
    whole, at index 0 or with no index).
    """

    def __init__(self, names: ToolNameMap) -> None:
        self._names = names
        self._calls: list[_PartialCall] = []
        self._at: dict[int, _PartialCall] = {}
        """The call each wire index currently continues."""
        self._usage: Usage | None = None
        self._model = ""
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
        if chunk.model:
            self._model = chunk.model
        if chunk.usage is not None:
            self._usage = _usage(chunk.usage, chunk.model or self._model)
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
        call = self._at.get(fragment.index)
        if call is None or (fragment.id and call.id and fragment.id != call.id):
            call = self._at[fragment.index] = _PartialCall()
            self._calls.append(call)
        if fragment.id and not call.id:
            call.id = fragment.id
        function = fragment.function
        if function is not None:
            if function.name and function.name != call.name:
                call.name += function.name
            if function.arguments:
                call.arguments += function.arguments

    def _complete_calls(self) -> list[ProviderEvent]:
        events: list[ProviderEvent] = [
            ToolCall(
                id=call.id or f"call_{uuid.uuid4().hex[:24]}",
                name=self._names.from_wire(call.name),
                arguments=call.arguments,
            )
            for call in self._calls
        ]
        self._calls.clear()
        self._at.clear()
        return events
