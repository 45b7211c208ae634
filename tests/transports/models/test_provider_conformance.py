"""The provider seam's conformance suite, run once per implementation.

:class:`ProviderConformance` states what the run actor relies on from any
:class:`~actors.provider.ModelProvider`; each subclass supplies the provider and the way to make
it propose a tool call or answer slowly (a directive for the deterministic provider, a scripted
reply for the fake OpenAI and Anthropic servers; the failover provider over a dead endpoint and
the OpenAI one).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import pytest

from actors.provider import (
    ChatMessage,
    ModelProvider,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolDefinition,
    TurnEnd,
    Usage,
)
from transports.models.anthropic import AnthropicConfig, AnthropicProvider
from transports.models.deterministic import DeterministicProvider
from transports.models.endpoints import EndpointConfig
from transports.models.failover import FailoverProvider
from transports.models.openai import OpenAIConfig, OpenAIProvider

T = TypeVar("T")

READ_TOOL = ToolDefinition(
    name="fs.read",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)


class ProviderConformance:
    """Abstract: subclasses implement the three hooks below."""

    def make_provider(self) -> ModelProvider:
        raise NotImplementedError

    def tool_call_request(self, name: str, arguments: str) -> ProviderRequest:
        """A request on which the model proposes exactly this one call."""
        raise NotImplementedError

    def slow_request(self) -> ProviderRequest:
        """A request whose answer takes far longer than any test waits."""
        raise NotImplementedError

    def run(self, scenario: Callable[[ModelProvider], Awaitable[T]]) -> T:
        async def main() -> T:
            provider = self.make_provider()
            try:
                return await scenario(provider)
            finally:
                await provider.aclose()

        return asyncio.run(main())

    def stream(self, request: ProviderRequest) -> list[ProviderEvent]:
        async def scenario(provider: ModelProvider) -> list[ProviderEvent]:
            async with aclosing(provider.stream(request)) as events:
                return [event async for event in events]

        return self.run(scenario)

    def test_plain_message_yields_text_then_one_usage_then_one_turn_end(self) -> None:
        events = self.stream(
            ProviderRequest(
                messages=(
                    ChatMessage(role="system", content="Be brief."),
                    ChatMessage(role="user", content="hello there world"),
                )
            )
        )

        deltas = [e for e in events if isinstance(e, TextDelta)]
        usages = [e for e in events if isinstance(e, Usage)]
        assert deltas
        assert "".join(d.text for d in deltas) == "hello there world"
        assert len(usages) == 1
        assert usages[0].prompt_tokens > 0
        assert usages[0].completion_tokens > 0
        assert events[-2:] == [usages[0], TurnEnd(finish_reason="stop")]

    def test_proposed_tool_call_keeps_the_catalog_name_and_json_arguments(self) -> None:
        events = self.stream(self.tool_call_request("fs.read", '{"path": "a.txt"}'))

        calls = [e for e in events if isinstance(e, ToolCall)]
        assert len(calls) == 1
        assert calls[0].name == "fs.read"
        assert calls[0].id
        assert json.loads(calls[0].arguments) == {"path": "a.txt"}
        assert not [e for e in events if isinstance(e, TextDelta)]
        assert events[-1] == TurnEnd(finish_reason="tool_calls")

    def test_conversation_with_tool_results_ends_with_a_final_answer(self) -> None:
        request = ProviderRequest(
            messages=(
                ChatMessage(role="user", content="what is in a.txt"),
                ChatMessage(
                    role="assistant",
                    tool_calls=(ToolCall(id="call_1", name="fs.read", arguments="{}"),),
                ),
                ChatMessage(role="tool", content="hi", tool_call_id="call_1", name="fs.read"),
            ),
            tools=(READ_TOOL,),
        )

        events = self.stream(request)

        assert [e for e in events if isinstance(e, TextDelta)]
        assert events[-1] == TurnEnd(finish_reason="stop")
        assert sum(isinstance(e, TurnEnd) for e in events) == 1

    def test_cancelling_the_consumer_stops_the_stream(self) -> None:
        request = self.slow_request()

        async def scenario(provider: ModelProvider) -> bool:
            async def consume() -> None:
                async for _ in provider.stream(request):
                    pass

            task = asyncio.create_task(consume())
            await asyncio.sleep(0.1)
            task.cancel()
            try:
                await asyncio.wait_for(task, 5)
            except asyncio.CancelledError:
                return True
            return False

        assert self.run(scenario) is True

    def test_aclose_is_safe_unused_and_twice(self) -> None:
        async def scenario(provider: ModelProvider) -> str:
            await provider.aclose()
            await provider.aclose()
            return provider.name

        assert self.run(scenario)


class TestDeterministicConformance(ProviderConformance):
    def make_provider(self) -> ModelProvider:
        return DeterministicProvider()

    def tool_call_request(self, name: str, arguments: str) -> ProviderRequest:
        return ProviderRequest(
            messages=(ChatMessage(role="user", content=f"/tool {name} {arguments}"),),
            tools=(READ_TOOL,),
        )

    def slow_request(self) -> ProviderRequest:
        return ProviderRequest(messages=(ChatMessage(role="user", content="/sleep 600000"),))


class TestOpenAIConformance(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _server(self, fake_openai: Any) -> None:
        self.server = fake_openai

    def make_provider(self) -> ModelProvider:
        return OpenAIProvider(
            OpenAIConfig(base_url=self.server.base_url, model="gpt-test", api_key="sk-conformance")
        )

    def tool_call_request(self, name: str, arguments: str) -> ProviderRequest:
        wire_name = name.replace(".", "__")
        self.server.queue(
            self.server.reply(pieces=self.server.tool_stream([("call_x1", wire_name, arguments)]))
        )
        return ProviderRequest(
            messages=(ChatMessage(role="user", content="read a.txt"),), tools=(READ_TOOL,)
        )

    def slow_request(self) -> ProviderRequest:
        self.server.queue(self.server.reply(delay_before_headers_s=600))
        return ProviderRequest(messages=(ChatMessage(role="user", content="take your time"),))


class TestAnthropicConformance(ProviderConformance):
    @pytest.fixture(autouse=True)
    def _server(self, fake_anthropic: Any) -> None:
        self.server = fake_anthropic

    def make_provider(self) -> ModelProvider:
        return AnthropicProvider(
            AnthropicConfig(base_url=self.server.base_url, model="claude-test", api_key="k" * 12)
        )

    def tool_call_request(self, name: str, arguments: str) -> ProviderRequest:
        server = self.server
        server.queue(
            server.reply(
                pieces=[
                    server.message_start(),
                    *server.tool(0, "toolu_x1", name.replace(".", "__"), arguments),
                    *server.message_end("tool_use", 12),
                ]
            )
        )
        return ProviderRequest(
            messages=(ChatMessage(role="user", content="read a.txt"),), tools=(READ_TOOL,)
        )

    def slow_request(self) -> ProviderRequest:
        self.server.queue(self.server.reply(delay_before_headers_s=600))
        return ProviderRequest(messages=(ChatMessage(role="user", content="take your time"),))


class TestFailoverConformance(TestOpenAIConformance):
    """A failover provider whose first endpoint refuses connections: every turn is answered by
    the second, and the seam's contract holds through the failover layer."""

    def make_provider(self) -> ModelProvider:
        dead = EndpointConfig(
            kind="openai", name="dead", base_url="http://127.0.0.1:9/v1", model="m", max_retries=0
        )
        live = EndpointConfig(
            kind="openai", name="live", base_url=self.server.base_url, model="gpt-test"
        )
        return FailoverProvider([dead, live])
