"""A fake OpenAI chat-completions server on 127.0.0.1 that speaks the real wire protocol.

It runs an aiohttp.web app on its own event loop in a background thread, so a test can drive
the client with ``asyncio.run`` on the main thread. Replies are scripted with :class:`ScriptedReply`
(status, headers, body, or the exact SSE byte pieces to stream); with no reply queued it
streams an echo of the last user message, word by word, as OpenAI does. Every request's
headers and JSON body are recorded.

Servers other than OpenAI differ in what they send and what they refuse (docs/providers.md,
"Known server differences"): the ``*_tool_stream`` helpers write a tool call the way each one
streams it, and :attr:`FakeOpenAI.refuses` makes the fake answer a request the way a stricter
server does (``string_content``: llama-cpp-python's 500 for an assistant message with tool calls
whose content is null or absent; ``bad_arguments``: llama-server's 500 for tool-call arguments
in the conversation that are not JSON).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web


@dataclass
class ScriptedReply:
    """One scripted response."""

    status: int = 200
    pieces: list[bytes] = field(default_factory=list)
    """For 200: the raw bytes written one after another (SSE chunks, or any slicing of them)."""
    body: bytes = b""
    """For other statuses, or a 200 with ``json`` content: the response body."""
    content_type: str = "text/event-stream"
    headers: dict[str, str] = field(default_factory=dict)
    delay_before_headers_s: float = 0.0
    delay_between_pieces_s: float = 0.0
    stall_after: int = -1
    """Pause ``stall_s`` after writing this many pieces (-1: never)."""
    stall_s: float = 0.0
    abort_after_pieces: bool = False
    """Drop the connection after the pieces instead of ending the response cleanly."""


@dataclass
class RecordedRequest:
    headers: dict[str, str]
    body: dict[str, Any]


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "system_fingerprint": "fp_test",
        "choices": [{"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish}],
        "usage": None,
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _usage_chunk(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> bytes:
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "system_fingerprint": "fp_test",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def text_stream(pieces: list[str], prompt_tokens: int = 9) -> list[bytes]:
    """The SSE chunks OpenAI sends for a plain text answer."""
    return [
        _chunk({"role": "assistant", "content": "", "refusal": None}),
        *(_chunk({"content": piece}) for piece in pieces),
        _chunk({}, "stop"),
        _usage_chunk(prompt_tokens, len(pieces)),
        DONE,
    ]


def tool_stream(calls: list[tuple[str, str, str]], fragment: int = 4) -> list[bytes]:
    """The SSE chunks OpenAI sends for parallel tool calls ``(id, wire_name, arguments)``:
    each call opens with its id and name, then its arguments arrive in small fragments."""
    chunks = [_chunk({"role": "assistant", "content": None, "refusal": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        opening = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        chunks.append(_chunk({"tool_calls": [opening]}))
        for start in range(0, len(arguments), fragment):
            part = {"index": index, "function": {"arguments": arguments[start : start + fragment]}}
            chunks.append(_chunk({"tool_calls": [part]}))
    chunks += [_chunk({}, "tool_calls"), _usage_chunk(20, 12), DONE]
    return chunks


def llama_cpp_python_tool_stream(name: str, call_id: str, pieces: list[str]) -> list[bytes]:
    """How llama-cpp-python 0.3 (``--chat_format chatml-function-calling``, a tool forced by
    ``tool_choice``) streams one call: every fragment repeats the complete name and id (and a
    legacy ``function_call``), the finish reason is ``tool_calls`` even when ``max_tokens`` cut
    the arguments, and there is no usage chunk."""

    def fragment(arguments: str) -> dict[str, Any]:
        return {
            "role": None,
            "content": None,
            "function_call": {"name": name, "arguments": arguments},
            "tool_calls": [
                {
                    "index": 0,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        }

    blank = {"role": "assistant", "content": None, "function_call": None, "tool_calls": None}
    closing = {"role": None, "content": None, "function_call": None, "tool_calls": None}
    return [
        _chunk(blank),
        *(_chunk(fragment(piece)) for piece in pieces),
        _chunk(closing, "tool_calls"),
        DONE,
    ]


def ollama_tool_stream(
    calls: list[tuple[str, str, str]], *, index: bool = True, finish: str = "tool_calls"
) -> list[bytes]:
    """How Ollama's ``/v1/chat/completions`` streams tool calls: each call whole, in a chunk of
    its own, every one at index 0 (0.20; ``index=False``: no index at all, up to 0.4.6); the
    streamed finish reason was ``stop`` before Ollama's PR #7963 (``finish``)."""
    chunks = []
    for call_id, name, arguments in calls:
        call: dict[str, Any] = {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        if index:
            call["index"] = 0
        chunks.append(_chunk({"role": "assistant", "content": "", "tool_calls": [call]}))
    closing = _chunk({"role": "assistant", "content": ""}, finish)
    return [*chunks, closing, _usage_chunk(30, 9), DONE]


def completion_reply(
    message: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int
) -> ScriptedReply:
    """A whole (non-streamed) ``chat.completion`` response, as OpenAI sends it."""
    payload = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return ScriptedReply(body=json.dumps(payload).encode(), content_type="application/json")


class FakeOpenAI:
    """The fake server; see the module docstring."""

    text_stream = staticmethod(text_stream)
    tool_stream = staticmethod(tool_stream)
    llama_cpp_python_tool_stream = staticmethod(llama_cpp_python_tool_stream)
    ollama_tool_stream = staticmethod(ollama_tool_stream)
    completion_reply = staticmethod(completion_reply)
    usage_chunk = staticmethod(_usage_chunk)
    chunk = staticmethod(_chunk)
    usage_chunk = staticmethod(_usage_chunk)
    DONE = DONE

    def __init__(self) -> None:
        self.replies: deque[ScriptedReply] = deque()
        self.requests: list[RecordedRequest] = []
        self.always: ScriptedReply | None = None
        """Answer every request with this (an endpoint that is down), queued replies or not."""
        self.refuses: set[str] = set()
        """What the fake answers with a server's error: ``string_content``, ``bad_arguments``."""
        self.disconnected = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @staticmethod
    def reply(**fields: Any) -> ScriptedReply:
        """A scripted :class:`ScriptedReply` (the fixture hands tests this, not the module)."""
        return ScriptedReply(**fields)

    def queue(self, *replies: ScriptedReply) -> None:
        self.replies.extend(replies)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    PATH = "/v1/chat/completions"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post(self.PATH, self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        # Handlers still sleeping (scripted slow replies) are cancelled, not abandoned.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def _echo(self, body: dict[str, Any]) -> ScriptedReply:
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        words = (users[-1].get("content") or "ack").split() if users else ["ack"]
        pieces = [word + " " for word in words[:-1]] + [words[-1]]
        prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        if body.get("stream") is False:
            message = {"role": "assistant", "content": "".join(pieces)}
            return completion_reply(message, "stop", prompt, len(pieces))
        return ScriptedReply(pieces=text_stream(pieces, prompt_tokens=prompt))

    def _refusal(self, body: dict[str, Any]) -> ScriptedReply | None:
        """The error a stricter server answers ``body`` with, if it would."""
        for message in body.get("messages", []):
            calls = message.get("tool_calls") or []
            content = message.get("content")
            if "string_content" in self.refuses and calls and not isinstance(content, str):
                error = "[{'type': 'string_type', 'loc': ('body', 'messages', 1, 'content'), "
                error += f"'msg': 'Input should be a valid string', 'input': {content!r}}}]"
                return ScriptedReply(
                    status=500, body=json.dumps({"error": {"message": error}}).encode()
                )
            for call in calls if "bad_arguments" in self.refuses else ():
                try:
                    json.loads(call["function"]["arguments"] or "{}")
                except ValueError as exc:
                    error = f"Failed to parse tool call arguments as JSON: {exc}"
                    payload = {"error": {"code": 500, "message": error, "type": "server_error"}}
                    return ScriptedReply(status=500, body=json.dumps(payload).encode())
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(RecordedRequest(headers=dict(request.headers), body=body))
        reply = self.always or self._refusal(body)
        if reply is None:
            reply = self.replies.popleft() if self.replies else self._echo(body)
        if reply.delay_before_headers_s:
            await asyncio.sleep(reply.delay_before_headers_s)
        if reply.status != 200 or reply.content_type == "application/json":
            return web.Response(
                status=reply.status,
                body=reply.body,
                headers={"Content-Type": "application/json", **reply.headers},
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        try:
            for written, piece in enumerate(reply.pieces, start=1):
                await response.write(piece)
                if written == reply.stall_after:
                    await asyncio.sleep(reply.stall_s)
                if reply.delay_between_pieces_s:
                    await asyncio.sleep(reply.delay_between_pieces_s)
            if reply.abort_after_pieces:
                assert request.transport is not None
                request.transport.abort()
                return response
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            self.disconnected.set()
            raise
        return response


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def anthropic_event(kind: str, **data: Any) -> bytes:
    """One Messages API stream event as Anthropic sends it: the ``event`` line names the type,
    the ``data`` line carries it again in ``type``."""
    payload = json.dumps({"type": kind, **data}, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


def message_start(
    input_tokens: int = 9, cache_read: int = 0, cache_creation: int = 0, model: str = "claude-test"
) -> bytes:
    return anthropic_event(
        "message_start",
        message={
            "id": "msg_01Test",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": input_tokens,
                "cache_creation_input_tokens": cache_creation,
                "cache_read_input_tokens": cache_read,
                "output_tokens": 1,
            },
        },
    )


def message_end(stop_reason: str, output_tokens: int) -> list[bytes]:
    return [
        anthropic_event(
            "message_delta",
            delta={"stop_reason": stop_reason, "stop_sequence": None},
            usage={"output_tokens": output_tokens},
        ),
        anthropic_event("message_stop"),
    ]


def anthropic_text(index: int, pieces: list[str]) -> list[bytes]:
    """A text block: its start, a ping, a ``text_delta`` per piece, its stop."""
    return [
        anthropic_event(
            "content_block_start", index=index, content_block={"type": "text", "text": ""}
        ),
        anthropic_event("ping"),
        *(
            anthropic_event(
                "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
            )
            for piece in pieces
        ),
        anthropic_event("content_block_stop", index=index),
    ]


def anthropic_tool(
    index: int, call_id: str, name: str, arguments: str, fragment: int = 5
) -> list[bytes]:
    """A ``tool_use`` block: its start (empty input), ``input_json_delta`` fragments, its stop."""
    return [
        anthropic_event(
            "content_block_start",
            index=index,
            content_block={"type": "tool_use", "id": call_id, "name": name, "input": {}},
        ),
        *(
            anthropic_event(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": arguments[i : i + fragment]},
            )
            for i in range(0, len(arguments), fragment)
        ),
        anthropic_event("content_block_stop", index=index),
    ]


class FakeAnthropic(FakeOpenAI):
    """The same scripted server speaking the Messages API at ``POST /v1/messages``; with no
    reply queued it streams an echo of the last user text, word by word."""

    PATH = "/v1/messages"
    event = staticmethod(anthropic_event)
    message_start = staticmethod(message_start)
    message_end = staticmethod(message_end)
    text = staticmethod(anthropic_text)
    tool = staticmethod(anthropic_tool)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _echo(self, body: dict[str, Any]) -> ScriptedReply:
        said = "ack"
        for message in body.get("messages", []):
            if message["role"] != "user":
                continue
            for block in message["content"]:
                if block.get("type") == "text":
                    said = block["text"]
        words = said.split() or ["ack"]
        pieces = [word + " " for word in words[:-1]] + [words[-1]]
        return ScriptedReply(
            pieces=[
                message_start(),
                *anthropic_text(0, pieces),
                *message_end("end_turn", len(pieces)),
            ]
        )


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    server.start()
    try:
        yield server
    finally:
        server.stop()
