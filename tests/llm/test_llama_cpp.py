"""The OpenAI provider against real model servers running SmolLM2-135M-Instruct: streamed text,
usage and a finish reason round-trip over the real wire protocol, from each server of
conftest.py (opt-in: ``REEL_TEST_LLM=1``, after tests/llm/prepare.sh). What a 135M-parameter
model says is not asserted.
"""

from __future__ import annotations

import asyncio
import os
from contextlib import aclosing

import pytest

from actors.provider import ChatMessage, ProviderEvent, ProviderRequest, TextDelta, TurnEnd, Usage
from tests.llm.conftest import Server
from transports.models.openai import OpenAIConfig, OpenAIProvider

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        os.environ.get("REEL_TEST_LLM") != "1", reason="real-model check: set REEL_TEST_LLM=1"
    ),
]


QUESTION = ProviderRequest(
    messages=(
        ChatMessage(role="system", content="You are a helpful assistant. Answer briefly."),
        ChatMessage(role="user", content="What is the capital of France?"),
    ),
    max_tokens=32,
)


def ask(server: Server, *, stream: bool) -> list[ProviderEvent]:
    config = OpenAIConfig(
        base_url=server.base_url, model="smollm2", timeout_s=60, max_retries=0, stream=stream
    )

    async def main() -> list[ProviderEvent]:
        provider = OpenAIProvider(config)
        try:
            async with aclosing(provider.stream(QUESTION)) as events:
                return [event async for event in events]
        finally:
            await provider.aclose()

    return asyncio.run(main())


def test_streamed_answer(server: Server) -> None:
    events = ask(server, stream=True)

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1, events
    assert "".join(d.text for d in deltas).strip()
    # llama-cpp-python 0.3.36 ignores stream_options.include_usage: no usage while streaming.
    usages = [e for e in events if isinstance(e, Usage)]
    assert len(usages) == (0 if server.name == "llama-cpp-python" else 1), events
    assert all(u.prompt_tokens > 0 and u.completion_tokens > 0 for u in usages)
    assert isinstance(events[-1], TurnEnd)
    assert events[-1].finish_reason in {"stop", "length"}


def test_whole_answer_with_usage(server: Server) -> None:
    events = ask(server, stream=False)

    assert len(events) == 3, events
    text, usage, end = events
    assert isinstance(text, TextDelta) and text.text.strip()
    assert isinstance(usage, Usage)
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert isinstance(end, TurnEnd)
    assert end.finish_reason in {"stop", "length"}
