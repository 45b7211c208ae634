"""The Anthropic Messages provider against a loopback server that speaks the documented stream
(``message_start``, ``content_block_start``/``delta``/``stop`` with ``text_delta`` and
``input_json_delta``, ``message_delta`` with usage, ``message_stop``, ``ping``, ``error``)."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from typing import Any

import pytest

from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolDefinition,
    TurnEnd,
    Usage,
)
from tests.transports.models.conftest import FakeAnthropic
from transports.models.anthropic import AnthropicConfig, AnthropicProvider

KEY = "sk-ant-api03-" + "x1y2z3" * 8
READ = ToolDefinition(
    name="fs.read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
HELLO = ProviderRequest(messages=(ChatMessage(role="user", content="hello"),))


def stream(server: FakeAnthropic, request: ProviderRequest, **config: Any) -> list[ProviderEvent]:
    async def main() -> list[ProviderEvent]:
        provider = AnthropicProvider(
            AnthropicConfig(base_url=server.base_url, model="claude-test", api_key=KEY, **config)
        )
        try:
            async with aclosing(provider.stream(request)) as events:
                return [event async for event in events]
        finally:
            await provider.aclose()

    return asyncio.run(main())


def failure(server: FakeAnthropic, request: ProviderRequest = HELLO) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        stream(server, request)
    return caught.value


def test_text_streams_as_it_comes_with_usage_counting_cache_tokens(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.queue(
        fake_anthropic.reply(
            pieces=[
                fake_anthropic.message_start(input_tokens=5, cache_read=100, cache_creation=20),
                *fake_anthropic.text(0, ["Hel", "lo ", "there"]),
                *fake_anthropic.message_end("end_turn", 7),
            ]
        )
    )

    events = stream(fake_anthropic, HELLO)

    assert events == [
        TextDelta("Hel"),
        TextDelta("lo "),
        TextDelta("there"),
        Usage(prompt_tokens=125, completion_tokens=7, cached_tokens=100, model="claude-test"),
        TurnEnd("stop"),
    ]


def test_a_tool_use_block_becomes_one_call_under_its_catalog_name(
    fake_anthropic: FakeAnthropic,
) -> None:
    arguments = '{"path": "notes/a long name.txt"}'
    fake_anthropic.queue(
        fake_anthropic.reply(
            pieces=[
                fake_anthropic.message_start(),
                *fake_anthropic.text(0, ["Let me look."]),
                *fake_anthropic.tool(1, "toolu_01A", "fs__read", arguments),
                *fake_anthropic.tool(2, "toolu_01B", "fs__read", ""),
                *fake_anthropic.message_end("tool_use", 30),
            ]
        )
    )

    events = stream(fake_anthropic, ProviderRequest(messages=HELLO.messages, tools=(READ,)))

    assert events[0] == TextDelta("Let me look.")
    assert events[1:3] == [
        ToolCall(id="toolu_01A", name="fs.read", arguments=arguments),
        ToolCall(id="toolu_01B", name="fs.read", arguments="{}"),
    ]
    assert events[-1] == TurnEnd("tool_calls")


def test_max_tokens_ends_length_and_unknown_events_and_deltas_are_skipped(
    fake_anthropic: FakeAnthropic,
) -> None:
    thinking = {"type": "thinking", "thinking": ""}
    fake_anthropic.queue(
        fake_anthropic.reply(
            pieces=[
                fake_anthropic.message_start(),
                fake_anthropic.event("content_block_start", index=0, content_block=thinking),
                fake_anthropic.event(
                    "content_block_delta",
                    index=0,
                    delta={"type": "thinking_delta", "thinking": "hmm"},
                ),
                fake_anthropic.event(
                    "content_block_delta",
                    index=0,
                    delta={"type": "signature_delta", "signature": "s"},
                ),
                fake_anthropic.event("content_block_stop", index=0),
                fake_anthropic.event("a_future_event", detail=1),
                *fake_anthropic.text(1, ["cut"]),
                *fake_anthropic.message_end("max_tokens", 1),
            ]
        )
    )

    events = stream(fake_anthropic, HELLO)

    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("cut")]
    assert events[-1] == TurnEnd("length")


def test_the_request_is_the_messages_api_shape(fake_anthropic: FakeAnthropic) -> None:
    request = ProviderRequest(
        messages=(
            ChatMessage(role="system", content="Be brief."),
            ChatMessage(role="user", content="read a and b"),
            ChatMessage(
                role="assistant",
                content="Reading.",
                tool_calls=(
                    ToolCall(id="toolu_1", name="fs.read", arguments='{"path": "a"}'),
                    ToolCall(id="toolu_2", name="fs.read", arguments='{"path": "b"}'),
                ),
            ),
            ChatMessage(role="tool", content="A", tool_call_id="toolu_1", name="fs.read"),
            ChatMessage(role="tool", content="B", tool_call_id="toolu_2", name="fs.read"),
        ),
        tools=(READ,),
    )

    stream(fake_anthropic, request, tool_choice="required", temperature=0.5)

    (sent,) = fake_anthropic.requests
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in sent.headers
    body = sent.body
    assert body["model"] == "claude-test" and body["stream"] is True
    assert body["max_tokens"] == 4096 and body["temperature"] == 0.5
    assert body["system"] == "Be brief."
    assert body["tools"] == [
        {"name": "fs__read", "description": "Read a file.", "input_schema": READ.parameters}
    ]
    assert "tool_choice" not in body  # a forced call never follows tool results
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a and b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "fs__read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "fs__read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"},
            ],
        },
    ]


def test_a_forced_tool_choice_applies_to_the_turn_answering_the_person(
    fake_anthropic: FakeAnthropic,
) -> None:
    request = ProviderRequest(messages=HELLO.messages, tools=(READ,))
    stream(fake_anthropic, request, tool_choice="required")
    stream(fake_anthropic, request, tool_choice="fs.read")
    stream(fake_anthropic, request, max_tokens=64)

    first, second, third = (r.body for r in fake_anthropic.requests)
    assert first["tool_choice"] == {"type": "any"}
    assert second["tool_choice"] == {"type": "tool", "name": "fs__read"}
    assert "tool_choice" not in third and third["max_tokens"] == 64


def test_an_error_status_names_the_api_error_without_the_key(
    fake_anthropic: FakeAnthropic,
) -> None:
    body = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {KEY}"},
    }
    fake_anthropic.queue(fake_anthropic.reply(status=401, body=json.dumps(body).encode()))

    error = failure(fake_anthropic)

    assert error.status == 401 and not error.retryable
    assert error.message.startswith(
        "provider returned 401: authentication_error: invalid x-api-key"
    )
    assert KEY not in error.message


def test_overloaded_is_retryable_with_the_servers_retry_after(
    fake_anthropic: FakeAnthropic,
) -> None:
    body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    fake_anthropic.queue(
        fake_anthropic.reply(
            status=529, body=json.dumps(body).encode(), headers={"retry-after": "7"}
        )
    )

    error = failure(fake_anthropic)

    assert error.status == 529 and error.retryable and error.retry_after_s == 7


@pytest.mark.parametrize(
    ("kind", "retryable"), [("overloaded_error", True), ("invalid_request_error", False)]
)
def test_an_error_event_mid_stream_fails_the_turn(
    fake_anthropic: FakeAnthropic, kind: str, retryable: bool
) -> None:
    fake_anthropic.queue(
        fake_anthropic.reply(
            pieces=[
                fake_anthropic.message_start(),
                fake_anthropic.event("error", error={"type": kind, "message": "went wrong"}),
            ]
        )
    )

    error = failure(fake_anthropic)

    assert error.retryable is retryable
    assert f"{kind}: went wrong" in error.message


def test_a_stream_cut_before_the_message_stopped_is_retryable(
    fake_anthropic: FakeAnthropic,
) -> None:
    fake_anthropic.queue(
        fake_anthropic.reply(
            pieces=[fake_anthropic.message_start(), *fake_anthropic.text(0, ["partial"])]
        )
    )

    error = failure(fake_anthropic)

    assert error.retryable and "stop reason" in error.message


def test_a_closed_port_is_a_retryable_connection_failure() -> None:
    server = FakeAnthropic()  # never started: port 0 refuses
    server.port = 9  # discard: nothing listens on loopback
    error = failure(server)
    assert error.retryable and error.message.startswith("cannot reach provider")


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("base_url", "api.anthropic.com", "base_url: must be an http"),
        ("model", " ", "model: must not be empty"),
        ("temperature", 1.5, "temperature: must be between 0 and 1"),
        ("max_tokens", 0, "max_tokens: must be 1 or more"),
        ("tool_choice", "a b", "tool_choice: must be"),
    ],
)
def test_bad_config_names_the_field(field: str, value: Any, problem: str) -> None:
    options: dict[str, Any] = {"model": "claude-test", field: value}
    with pytest.raises(ValueError, match=problem):
        AnthropicConfig(**options)


def test_the_key_stays_out_of_repr() -> None:
    provider = AnthropicProvider(AnthropicConfig(model="claude-test", api_key=KEY))
    assert KEY not in repr(provider) and "<redacted>" in repr(provider)
