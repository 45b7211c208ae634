"""Incremental decoder for ``text/event-stream`` bodies (Server-Sent Events).

The OpenAI streaming API sends ``data: {json}`` events separated by blank lines and ends with
``data: [DONE]``. Bytes arrive in arbitrary pieces, so the decoder keeps the unfinished line and
the unfinished event between calls. Only ``data`` fields matter to model providers; ``event``,
``id``, ``retry`` and comment lines are read and dropped. Lines end with LF or CRLF (a lone CR,
which the SSE grammar also allows, is not used by any chat-completions server and is not
supported). A line longer than ``max_line_bytes`` is an error, so a misbehaving server cannot
make the client buffer without bound.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Protocol

from actors.provider import ProviderError, ProviderEvent

__all__ = ["Assembler", "SSEDecoder", "SSEError", "provider_events"]


class SSEError(ValueError):
    """The byte stream is not valid Server-Sent Events within the decoder's limits."""


class SSEDecoder:
    """Bytes in, the ``data`` payload of each completed event out."""

    def __init__(self, *, max_line_bytes: int = 8 * 1024 * 1024) -> None:
        self._max_line_bytes = max_line_bytes
        self._pending = bytearray()
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """Add received bytes; return the data of every event they complete, in order."""
        self._pending += chunk
        events: list[str] = []
        start = 0
        while True:
            end = self._pending.find(b"\n", start)
            if end < 0:
                break
            line = bytes(self._pending[start:end])
            start = end + 1
            self._line(line.removesuffix(b"\r"), events)
        del self._pending[:start]
        if len(self._pending) > self._max_line_bytes:
            raise SSEError(f"event-stream line longer than {self._max_line_bytes} bytes")
        return events

    def flush(self) -> list[str]:
        """At end of stream: the data of an event the server did not end with a blank line."""
        events: list[str] = []
        if self._pending:
            self._line(bytes(self._pending).removesuffix(b"\r"), events)
            self._pending.clear()
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[str]) -> None:
        if not raw:
            self._dispatch(events)
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEError(f"event-stream line is not UTF-8: {exc.reason}") from None
        if line.startswith(":"):
            return
        field, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)

    def _dispatch(self, events: list[str]) -> None:
        if self._data:
            events.append("\n".join(self._data))
            self._data = []


class Assembler(Protocol):
    """Folds one response's event payloads into provider events (each wire protocol has one:
    ``openai_wire.StreamAssembler``, ``anthropic_wire.MessageAssembler``)."""

    @property
    def done(self) -> bool:
        """The stream said it is over: what follows is not read."""
        ...

    def feed(self, data: str) -> list[ProviderEvent]: ...

    def finish(self) -> list[ProviderEvent]:
        """The closing events; raises :class:`ProviderError` for a stream cut short."""
        ...


async def provider_events(
    chunks: AsyncIterator[bytes], assembler: Assembler
) -> AsyncGenerator[ProviderEvent, None]:
    """The provider events of an SSE body arriving as ``chunks``, as ``assembler`` folds them;
    a body that is not valid SSE is a :class:`ProviderError`."""
    decoder = SSEDecoder()
    try:
        async for chunk in chunks:
            for data in decoder.feed(chunk):
                for event in assembler.feed(data):
                    yield event
                if assembler.done:
                    break
            if assembler.done:
                break
        if not assembler.done:
            for data in decoder.flush():
                for event in assembler.feed(data):
                    yield event
    except SSEError as exc:
        raise ProviderError(f"provider sent an invalid event stream: {exc}") from None
    for event in assembler.finish():
        yield event
