"""OpenAIProvider against a fake server speaking the real chat-completions wire protocol."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import pytest

from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ProviderTimeout,
    TextDelta,
    ToolCall,
    ToolDefinition,
    TurnEnd,
    Usage,
)
from transports.models.openai import OpenAIConfig, OpenAIProvider

API_KEY = "sk-test-0123456789abcdef"
T = TypeVar("T")

HELLO = ProviderRequest(messages=(ChatMessage(role="user", content="say hello"),))
READ_TOOL = ToolDefinition(
    name="fs.read",
    description="Read a file in the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
)
TIME_TOOL = ToolDefinition(
    name="time.now", description="Current time.", parameters={"type": "object", "properties": {}}
)


def config(server: Any, **overrides: Any) -> OpenAIConfig:
    values: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "gpt-test",
        "api_key": API_KEY,
        "timeout_s": 5.0,
        "backoff_base_s": 0.0,
    }
    values.update(overrides)
    return OpenAIConfig(**values)


def run_with(cfg: OpenAIConfig, scenario: Callable[[OpenAIProvider], Awaitable[T]]) -> T:
    async def main() -> T:
        provider = OpenAIProvider(cfg)
        try:
            return await scenario(provider)
        finally:
            await provider.aclose()

    return asyncio.run(main())


async def collect(provider: OpenAIProvider, request: ProviderRequest) -> list[ProviderEvent]:
    async with aclosing(provider.stream(request)) as stream:
        return [event async for event in stream]


def stream_all(cfg: OpenAIConfig, request: ProviderRequest) -> list[ProviderEvent]:
    return run_with(cfg, lambda provider: collect(provider, request))


def stream_error(cfg: OpenAIConfig, request: ProviderRequest) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        stream_all(cfg, request)
    return caught.value


def test_text_is_streamed_as_deltas_then_usage_then_turn_end(fake_openai: Any) -> None:
    fake_openai.queue(fake_openai.reply(pieces=fake_openai.text_stream(["Hel", "lo", ", world"])))

    events = stream_all(config(fake_openai), HELLO)

    assert events == [
        TextDelta(text="Hel"),
        TextDelta(text="lo"),
        TextDelta(text=", world"),
        Usage(prompt_tokens=9, completion_tokens=3, model="gpt-test"),
        TurnEnd(finish_reason="stop"),
    ]


def test_usage_names_the_answering_model_and_the_cached_prompt_tokens(fake_openai: Any) -> None:
    """The model as the server names it (it may differ from the one asked for: an alias) and
    the prompt tokens served from its cache reach ``run.turn_completed`` (issue 26's usage)."""
    stream = fake_openai.text_stream(["ok"])
    stream[-2] = fake_openai.usage_chunk(120, 1, cached_tokens=96)
    fake_openai.queue(fake_openai.reply(pieces=stream))

    events = stream_all(config(fake_openai), HELLO)

    assert Usage(prompt_tokens=120, completion_tokens=1, cached_tokens=96, model="gpt-test") in (
        events
    )


def test_sse_bytes_split_at_arbitrary_boundaries_are_reassembled(fake_openai: Any) -> None:
    whole = b"".join(fake_openai.text_stream(["caf\u00e9 ", "na\u00efve"]))
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    fake_openai.queue(fake_openai.reply(pieces=pieces, delay_between_pieces_s=0.001))

    events = stream_all(config(fake_openai), HELLO)

    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "caf\u00e9 na\u00efve"
    assert events[-1] == TurnEnd(finish_reason="stop")


def test_two_parallel_tool_calls_are_assembled_from_fragments(fake_openai: Any) -> None:
    fake_openai.queue(
        fake_openai.reply(
            pieces=fake_openai.tool_stream(
                [
                    ("call_A1", "fs__read", '{"path": "notes/today.md"}'),
                    ("call_B2", "time__now", "{}"),
                ]
            )
        )
    )
    request = ProviderRequest(
        messages=(ChatMessage(role="user", content="read my notes and tell the time"),),
        tools=(READ_TOOL, TIME_TOOL),
    )

    events = stream_all(config(fake_openai), request)

    assert events == [
        ToolCall(id="call_A1", name="fs.read", arguments='{"path": "notes/today.md"}'),
        ToolCall(id="call_B2", name="time.now", arguments="{}"),
        Usage(prompt_tokens=20, completion_tokens=12, model="gpt-test"),
        TurnEnd(finish_reason="tool_calls"),
    ]


def test_request_carries_tools_history_and_api_key(fake_openai: Any) -> None:
    request = ProviderRequest(
        messages=(
            ChatMessage(role="system", content="You are terse."),
            ChatMessage(role="user", content="read a.txt"),
            ChatMessage(
                role="assistant",
                tool_calls=(ToolCall(id="call_1", name="fs.read", arguments='{"path":"a.txt"}'),),
            ),
            ChatMessage(role="tool", content="hello", tool_call_id="call_1", name="fs.read"),
        ),
        tools=(READ_TOOL,),
        max_tokens=50,
    )

    stream_all(config(fake_openai, extra_headers={"OpenAI-Organization": "org-1"}), request)

    [recorded] = fake_openai.requests
    assert recorded.headers["Authorization"] == f"Bearer {API_KEY}"
    assert recorded.headers["OpenAI-Organization"] == "org-1"
    body = recorded.body
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 50
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "fs__read",
                "description": "Read a file in the workspace.",
                "parameters": READ_TOOL.parameters,
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "read a.txt"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "fs__read", "arguments": '{"path":"a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
    ]


def test_request_model_overrides_the_configured_one_and_no_key_sends_no_auth(
    fake_openai: Any,
) -> None:
    request = ProviderRequest(messages=HELLO.messages, model="other-model")

    stream_all(config(fake_openai, api_key=None), request)

    [recorded] = fake_openai.requests
    assert recorded.body["model"] == "other-model"
    assert "tools" not in recorded.body
    assert "Authorization" not in recorded.headers


def test_429_is_retried_then_succeeds(fake_openai: Any) -> None:
    fake_openai.queue(
        fake_openai.reply(
            status=429,
            body=b'{"error":{"message":"Rate limit reached","type":"requests"}}',
            headers={"Retry-After": "0"},
        )
    )

    events = stream_all(config(fake_openai), HELLO)

    assert len(fake_openai.requests) == 2
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "say hello"


def test_500_three_times_fails_after_the_retries(fake_openai: Any) -> None:
    for _ in range(3):
        fake_openai.queue(
            fake_openai.reply(status=500, body=b'{"error":{"message":"The server had an error"}}')
        )

    error = stream_error(config(fake_openai, max_retries=2), HELLO)

    assert len(fake_openai.requests) == 3
    assert error.retryable is True
    assert error.status == 500
    assert str(error) == "provider returned 500 after 3 attempts: The server had an error"


def test_retry_after_longer_than_the_backoff_cap_fails_at_once_as_retryable(
    fake_openai: Any,
) -> None:
    fake_openai.queue(
        fake_openai.reply(status=429, body=b"slow down", headers={"Retry-After": "120"})
    )

    error = stream_error(config(fake_openai, backoff_max_s=1.0), HELLO)

    assert len(fake_openai.requests) == 1
    assert (error.status, error.retryable) == (429, True)
    assert "slow down" in str(error)


def test_400_fails_at_once_with_the_server_message(fake_openai: Any) -> None:
    fake_openai.queue(
        fake_openai.reply(
            status=400,
            body=json.dumps(
                {"error": {"message": "Invalid schema for function 'fs__read'", "code": None}}
            ).encode(),
        )
    )

    error = stream_error(config(fake_openai), HELLO)

    assert len(fake_openai.requests) == 1
    assert (error.status, error.retryable) == (400, False)
    assert str(error) == "provider returned 400: Invalid schema for function 'fs__read'"


def test_401_error_never_contains_the_api_key(fake_openai: Any) -> None:
    # Real OpenAI echoes (part of) the key it rejected; the client must scrub it.
    fake_openai.queue(
        fake_openai.reply(
            status=401,
            body=json.dumps(
                {"error": {"message": f"Incorrect API key provided: {API_KEY}. invalid api key"}}
            ).encode(),
        )
    )

    error = stream_error(config(fake_openai), HELLO)

    assert error.status == 401
    assert error.retryable is False
    assert str(error).startswith("provider returned 401: Incorrect API key provided:")
    assert "invalid api key" in str(error)
    assert API_KEY not in str(error)
    assert API_KEY not in repr(error)
    assert "sk-test" not in str(error)


def test_slow_response_raises_provider_timeout(fake_openai: Any) -> None:
    fake_openai.queue(fake_openai.reply(delay_before_headers_s=3.0))

    error = stream_error(config(fake_openai, timeout_s=0.2), HELLO)

    assert isinstance(error, ProviderTimeout)
    assert len(fake_openai.requests) == 1


def test_stalled_stream_raises_provider_timeout_after_output(fake_openai: Any) -> None:
    chunks = fake_openai.text_stream(["one", "two"])
    fake_openai.queue(fake_openai.reply(pieces=chunks, stall_after=2, stall_s=3.0))
    seen: list[ProviderEvent] = []

    async def scenario(provider: OpenAIProvider) -> None:
        async with aclosing(provider.stream(HELLO)) as stream:
            async for event in stream:
                seen.append(event)

    with pytest.raises(ProviderTimeout):
        run_with(config(fake_openai, timeout_s=0.3), scenario)
    assert seen == [TextDelta(text="one")]
    assert len(fake_openai.requests) == 1


def test_connection_lost_mid_stream_is_an_error_and_not_retried(fake_openai: Any) -> None:
    chunks = fake_openai.text_stream(["partial ", "answer"])[:2]
    fake_openai.queue(fake_openai.reply(pieces=chunks, abort_after_pieces=True))

    error = stream_error(config(fake_openai), HELLO)

    assert error.retryable is True
    assert "interrupted" in str(error)
    assert len(fake_openai.requests) == 1


def test_stream_without_finish_reason_is_an_error(fake_openai: Any) -> None:
    chunks = fake_openai.text_stream(["cut"])
    fake_openai.queue(fake_openai.reply(pieces=chunks[:2]))

    error = stream_error(config(fake_openai, max_retries=0), HELLO)

    assert "before a finish reason" in str(error)


def test_error_event_inside_the_stream_is_raised(fake_openai: Any) -> None:
    error_chunk = b'data: {"error":{"message":"model overloaded","type":"server_error"}}\n\n'
    fake_openai.queue(fake_openai.reply(pieces=[error_chunk]))

    error = stream_error(config(fake_openai), HELLO)

    assert str(error) == "provider reported an error mid-stream: model overloaded"


def test_unreachable_server_is_a_retryable_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cfg = OpenAIConfig(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key=API_KEY, backoff_base_s=0
    )

    error = stream_error(cfg, HELLO)

    assert error.retryable is True
    assert "cannot reach provider" in str(error)
    assert API_KEY not in str(error)


def test_cancelling_the_consumer_closes_the_connection(fake_openai: Any) -> None:
    endless = [fake_openai.chunk({"content": "tick "}) for _ in range(400)]
    fake_openai.queue(fake_openai.reply(pieces=endless, delay_between_pieces_s=0.05))

    async def scenario(provider: OpenAIProvider) -> bool:
        first = asyncio.Event()

        async def consume() -> None:
            async for event in provider.stream(HELLO):
                if isinstance(event, TextDelta):
                    first.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await asyncio.to_thread(fake_openai.disconnected.wait, 10)

    assert run_with(config(fake_openai), scenario) is True


def test_config_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIConfig(base_url="ftp://example", model="m")
    with pytest.raises(ValueError, match="timeout_s"):
        OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", timeout_s=0)
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", max_retries=-1)
    with pytest.raises(ValueError, match="extra_headers"):
        OpenAIConfig(
            base_url="http://127.0.0.1:1/v1", model="m", extra_headers={"Authorization": "x"}
        )


def test_config_and_provider_repr_hide_the_api_key() -> None:
    cfg = OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", api_key=API_KEY)

    assert API_KEY not in repr(cfg)
    assert API_KEY not in str(cfg)
    assert API_KEY not in repr(OpenAIProvider(cfg))
    assert "<redacted>" in repr(cfg)


def test_non_streamed_completion_yields_text_usage_and_turn_end(fake_openai: Any) -> None:
    events = stream_all(config(fake_openai, stream=False), HELLO)

    assert events == [
        TextDelta(text="say hello"),
        Usage(prompt_tokens=2, completion_tokens=2, model="gpt-test"),
        TurnEnd(finish_reason="stop"),
    ]
    [recorded] = fake_openai.requests
    assert recorded.body["stream"] is False
    assert "stream_options" not in recorded.body


def test_non_streamed_tool_calls_map_names_back(fake_openai: Any) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_Q",
                "type": "function",
                "function": {"name": "fs__read", "arguments": '{"path":"b"}'},
            }
        ],
    }
    fake_openai.queue(fake_openai.completion_reply(message, "tool_calls", 10, 5))
    request = ProviderRequest(messages=HELLO.messages, tools=(READ_TOOL,))

    events = stream_all(config(fake_openai, stream=False), request)

    assert events == [
        ToolCall(id="call_Q", name="fs.read", arguments='{"path":"b"}'),
        Usage(prompt_tokens=10, completion_tokens=5, model="gpt-test"),
        TurnEnd(finish_reason="tool_calls"),
    ]
