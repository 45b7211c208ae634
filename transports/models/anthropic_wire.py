"""The Anthropic Messages wire format: request bodies out, stream events in.

Pure translation, no I/O. :func:`encode_request` builds the JSON body of ``POST /v1/messages``:
system messages become the top-level ``system`` text, an assistant turn's calls become
``tool_use`` blocks (their arguments parsed: the API takes an object), ``tool`` messages become
``tool_result`` blocks of a user message, and consecutive messages of one role are merged into
one (the API alternates user and assistant). :class:`MessageAssembler` turns the ``data`` of each
Server-Sent Event into provider events, reading the event's ``type`` as documented:
``message_start`` (model, input usage), ``content_block_start`` / ``content_block_delta``
(``text_delta``, ``input_json_delta``) / ``content_block_stop``, ``message_delta`` (stop reason,
output usage), ``message_stop``, ``ping`` and ``error``. Types and deltas it does not know
(``thinking_delta``, ``signature_delta``, ``citations_delta``, future ones) are skipped, as the
API's versioning policy asks of clients.
"""

from __future__ import annotations

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
from transports.models.openai_wire import forced_choice
from transports.models.tool_names import ToolNameMap

__all__ = ["API_VERSION", "DEFAULT_MAX_TOKENS", "MessageAssembler", "encode_request"]

API_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every request carries."""
DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``: what a request that sets none sends."""

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
"""Anthropic's ``stop_reason`` as the seam's finish reasons spell them (others pass as they are:
``pause_turn``)."""
RETRYABLE_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error"})
"""Error types of an ``error`` event that a later attempt may not meet."""


def _arguments(text: str) -> dict[str, Any]:
    """A call's JSON arguments as the object ``tool_use.input`` must be ({} when they are not
    one: the run never sends back a call whose arguments were not JSON)."""
    try:
        value = msgspec.json.decode(text or "{}")
    except msgspec.DecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _blocks(message: ChatMessage, names: ToolNameMap) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": names.to_wire(call.name),
                "input": _arguments(call.arguments),
            }
        )
    return blocks


def _tool_choice(
    choice: str | None, request: ProviderRequest, names: ToolNameMap
) -> dict[str, Any] | None:
    """The OpenAI provider's rule (a forced call only on a turn answering the person), in the
    Messages API's shape."""
    wire = forced_choice(choice, request, names)
    if wire is None:
        return None
    if isinstance(wire, dict):
        return {"type": "tool", "name": wire["function"]["name"]}
    return {"type": {"required": "any"}.get(wire, wire)}


def encode_request(
    request: ProviderRequest,
    model: str,
    names: ToolNameMap,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    tool_choice: str | None = None,
) -> dict[str, Any]:
    """The streamed ``POST /v1/messages`` body for ``request`` (``model`` when it names none;
    ``max_tokens`` when it sets no limit, else :data:`DEFAULT_MAX_TOKENS`)."""
    system = "\n\n".join(m.content for m in request.messages if m.role == "system" and m.content)
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message, names)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    limit = request.max_tokens or max_tokens or DEFAULT_MAX_TOKENS
    body: dict[str, Any] = {
        "model": request.model or model,
        "max_tokens": limit,
        "messages": messages,
        "stream": True,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {
                "name": names.to_wire(tool.name),
                "description": tool.description,
                "input_schema": tool.parameters,
            }
            for tool in request.tools
        ]
        choice = _tool_choice(tool_choice, request, names)
        if choice is not None:
            body["tool_choice"] = choice
    if temperature is not None:
        body["temperature"] = temperature
    return body


class _UsageWire(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _MessageWire(msgspec.Struct):
    model: str | None = None
    usage: _UsageWire | None = None


class _BlockWire(msgspec.Struct):
    type: str = ""
    text: str | None = None
    id: str | None = None
    name: str | None = None


class _DeltaWire(msgspec.Struct):
    type: str | None = None
    text: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _ErrorWire(msgspec.Struct):
    type: str = ""
    message: str = ""


class _EventWire(msgspec.Struct):
    type: str
    index: int | None = None
    message: _MessageWire | None = None
    content_block: _BlockWire | None = None
    delta: _DeltaWire | None = None
    usage: _UsageWire | None = None
    error: _ErrorWire | None = None


_event_decoder = msgspec.json.Decoder(_EventWire)


class _Call:
    __slots__ = ("arguments", "id", "name")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.arguments = ""


class MessageAssembler:
    """Folds one response's events into provider events.

    :meth:`feed` takes the ``data`` of each SSE event and returns text deltas at once and each
    tool call when its block stops; :attr:`done` turns true at ``message_stop``. :meth:`finish`
    returns the usage and the turn end, or raises when the stream ended before the message did.
    Usage: ``prompt_tokens`` is the input the turn was charged for, cached or not
    (``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``);
    ``cached_tokens`` the part read from the cache; ``completion_tokens`` the last
    ``output_tokens`` (the API's counts are cumulative).
    """

    def __init__(self, names: ToolNameMap) -> None:
        self._names = names
        self._calls: dict[int, _Call] = {}
        self._usage = _UsageWire()
        self._model = ""
        self._stop_reason: str | None = None
        self.done = False

    def feed(self, data: str) -> list[ProviderEvent]:
        """The events one SSE ``data`` payload carries."""
        try:
            event = _event_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"provider sent a malformed stream event ({exc}): {data[:200]}", retryable=True
            ) from None
        kind = event.type
        if kind == "message_start" and event.message is not None:
            self._model = event.message.model or ""
            self._absorb(event.message.usage)
        elif kind == "content_block_start" and event.content_block is not None:
            return self._start(event.index or 0, event.content_block)
        elif kind == "content_block_delta" and event.delta is not None:
            return self._delta(event.index or 0, event.delta)
        elif kind == "content_block_stop":
            return self._stop(event.index or 0)
        elif kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason:
                self._stop_reason = event.delta.stop_reason
            self._absorb(event.usage)
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = event.error or _ErrorWire()
            raise ProviderError(
                f"provider reported an error mid-stream: {error.type}: {error.message[:300]}",
                retryable=error.type in RETRYABLE_ERRORS,
            )
        return []

    def finish(self) -> list[ProviderEvent]:
        """The closing usage and turn end, once the stream is over."""
        if self._stop_reason is None:
            raise ProviderError(
                "provider stream ended before the message's stop reason was sent", retryable=True
            )
        events: list[ProviderEvent] = [self._stop(index)[0] for index in sorted(self._calls)]
        u = self._usage
        cached = u.cache_read_input_tokens or 0
        prompt = (u.input_tokens or 0) + (u.cache_creation_input_tokens or 0) + cached
        events.append(
            Usage(
                prompt_tokens=prompt,
                completion_tokens=u.output_tokens or 0,
                cached_tokens=cached,
                model=self._model,
            )
        )
        events.append(TurnEnd(STOP_REASONS.get(self._stop_reason, self._stop_reason)))
        return events

    def _absorb(self, usage: _UsageWire | None) -> None:
        """Counts a later event sends replace earlier ones (they are cumulative)."""
        if usage is None:
            return
        for field in _UsageWire.__struct_fields__:
            value = getattr(usage, field)
            if value is not None:
                setattr(self._usage, field, value)

    def _start(self, index: int, block: _BlockWire) -> list[ProviderEvent]:
        if block.type == "tool_use":
            call_id = block.id or f"toolu_{uuid.uuid4().hex[:24]}"
            self._calls[index] = _Call(call_id, self._names.from_wire(block.name or ""))
        elif block.type == "text" and block.text:
            return [TextDelta(text=block.text)]
        return []

    def _delta(self, index: int, delta: _DeltaWire) -> list[ProviderEvent]:
        if delta.type == "text_delta" and delta.text:
            return [TextDelta(text=delta.text)]
        if delta.type == "input_json_delta" and delta.partial_json:
            call = self._calls.get(index)
            if call is not None:
                call.arguments += delta.partial_json
        return []

    def _stop(self, index: int) -> list[ProviderEvent]:
        call = self._calls.pop(index, None)
        if call is None:
            return []
        return [ToolCall(id=call.id, name=call.name, arguments=call.arguments or "{}")]
