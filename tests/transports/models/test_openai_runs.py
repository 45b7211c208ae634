"""Runs of a real node whose model is a server speaking the OpenAI wire protocol the way the
servers people run do (the fake of conftest.py, made as strict as they are).

A tool loop completes against llama-cpp-python's way of streaming (its repeated name and id, its
refusal of null content); a turn whose calls cannot be made (cut off at ``length``, or arguments
that are not JSON) proposes nothing, sends nothing back, and fails the run ``provider_error``
with the reason, the turn recorded; ``stream = false`` records usage and calls as streaming
does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.transports.http.httpkit import MAX_BODY, HttpNode, close_node
from tests.transports.models.conftest import FakeOpenAI
from transports.config import HttpConfig, NodeConfig, ProviderConfig
from transports.http import start_http
from transports.runtime import open_runtime


@pytest.fixture
def strict_model(fake_openai: FakeOpenAI) -> FakeOpenAI:
    """The fake, refusing what llama-cpp-python and llama-server refuse."""
    fake_openai.refuses |= {"string_content", "bad_arguments"}
    return fake_openai


@pytest.fixture
def open_node(data_dir: Path, strict_model: FakeOpenAI) -> Iterator[Any]:
    nodes: list[HttpNode] = []

    def start(**provider: Any) -> HttpNode:
        config = NodeConfig(
            http=HttpConfig(port=0, max_body_bytes=MAX_BODY),
            provider=ProviderConfig(
                kind="openai",
                base_url=strict_model.base_url,
                model="smollm2",
                timeout_s=10,
                max_retries=0,
                **provider,
            ),
        )
        runtime = open_runtime(data_dir, config=config)
        server = start_http(runtime, keepalive_s=0.3)
        token = (data_dir / "admin.token").read_text().strip()
        nodes.append(HttpNode(runtime=runtime, server=server, token=token))
        return nodes[-1]

    try:
        yield start
    finally:
        for node in nodes:
            close_node(node)


def run(node: HttpNode, text: str) -> dict[str, list[dict[str, Any]]]:
    """Start a run and follow it to its end: its events (run's and tools') by kind."""
    run_id = node.start(text)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for event in node.finish(run_id):
        if event.event and event.data:
            by_kind.setdefault(event.event, []).append(event.entry["event"])
    return by_kind


def turns(model: FakeOpenAI) -> list[dict[str, Any]]:
    """What the run's turns sent the model. With a model, reflection asks it about a completed
    run too (learning's "auto" extractor), whenever its task gets to it: that request offers
    no tools (actors/learning/rules.py's ``model_request``)."""
    return [r.body for r in model.requests if r.body.get("tools")]


def echo_call(model: FakeOpenAI, pieces: list[str]) -> list[bytes]:
    stream: list[bytes] = model.llama_cpp_python_tool_stream("echo", "call__0_echo_c1", pieces)
    return stream


def test_a_llama_cpp_python_tool_loop_completes(open_node: Any, strict_model: FakeOpenAI) -> None:
    strict_model.queue(strict_model.reply(pieces=echo_call(strict_model, ['{"text"', ': "ping"}'])))
    node = open_node()

    events = run(node, "call echo with ping")

    (proposed,) = events["tool.proposed"]
    assert (proposed["tool"], proposed["arguments"]) == ("echo", {"text": "ping"})
    (completed,) = events["tool.completed"]
    assert completed["ok"] and json.loads(completed["output"]) == {"text": "ping"}
    (done,) = events["run.completed"]
    assert (done["turns"], done["tool_calls"]) == (2, 1)
    _, second = turns(strict_model)
    assistant, result = second["messages"][-2:]
    assert assistant["content"] == "" and assistant["tool_calls"][0]["id"] == "call__0_echo_c1"
    assert result == {
        "role": "tool",
        "tool_call_id": "call__0_echo_c1",
        "content": completed["output"],
    }


@pytest.mark.parametrize(
    ("reply", "finish", "why"),
    [
        # OpenAI, llama-server: the limit cuts the arguments and the server says so
        ("length", "length", "cut off at its token limit (finish_reason length) in tool calls"),
        # llama-cpp-python: the limit cuts them and the server says tool_calls
        ("llama-cpp-python", "tool_calls", "arguments for echo (call__0_echo_c1) are not valid"),
    ],
)
def test_a_call_cut_off_by_max_tokens_is_never_made_nor_sent_back(
    open_node: Any, strict_model: FakeOpenAI, reply: str, finish: str, why: str
) -> None:
    if reply == "length":
        chunk = strict_model.chunk
        opening = {"index": 0, "id": "call_7", "type": "function", "function": {"name": "echo"}}
        pieces = [
            chunk({"role": "assistant", "content": None, "tool_calls": [opening]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"text": "pi'}}]}),
            chunk({}, "length"),
            strict_model.usage_chunk(120, 8),
            strict_model.DONE,
        ]
    else:
        pieces = echo_call(strict_model, ['{"text"', ': "pi'])
    strict_model.queue(strict_model.reply(pieces=pieces))
    node = open_node()

    events = run(node, "call echo with ping")

    assert "tool.proposed" not in events
    (turn,) = events["run.turn_completed"]
    assert (turn["finish_reason"], turn["tool_calls"], turn["calls"]) == (finish, 0, [])
    (failed,) = events["run.failed"]
    assert failed["reason"] == "provider_error" and why in failed["message"]
    assert (failed["turns"], failed["tool_calls"]) == (1, 0)
    assert len(strict_model.requests) == 1  # nothing broken went back to the server


def test_without_streaming_usage_and_calls_are_recorded(
    open_node: Any, strict_model: FakeOpenAI
) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call__0_echo_w",
                "type": "function",
                "function": {"name": "echo", "arguments": '{"text": "ping"}'},
            }
        ],
    }
    strict_model.queue(strict_model.completion_reply(message, "tool_calls", 150, 9))
    node = open_node(stream=False)

    events = run(node, "call echo with ping")

    first_turn, second_turn = events["run.turn_completed"]
    assert (first_turn["prompt_tokens"], first_turn["completion_tokens"]) == (150, 9)
    assert first_turn["calls"] == [
        {"id": "call__0_echo_w", "name": "echo", "arguments": '{"text": "ping"}'}
    ]
    assert second_turn["completion_tokens"] > 0  # the fake's whole echo reports usage too
    (done,) = events["run.completed"]
    assert done["prompt_tokens"] == 150 + second_turn["prompt_tokens"]
    assert all(body["stream"] is False for body in turns(strict_model))


def test_the_provider_options_reach_the_server(open_node: Any, strict_model: FakeOpenAI) -> None:
    strict_model.queue(strict_model.reply(pieces=echo_call(strict_model, ['{"text": "ping"}'])))
    extra = {"top_k": 1, "cache_prompt": True}
    node = open_node(max_tokens=64, temperature=0.0, tool_choice="echo", extra_body=extra)

    assert "run.completed" in run(node, "call echo with ping")

    first, second = turns(strict_model)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "echo"}}
    assert "tool_choice" not in second  # after the result, the answer is the model's to give
    for body in (first, second):
        assert (body["max_tokens"], body["temperature"]) == (64, 0.0)
        assert (body["top_k"], body["cache_prompt"]) == (1, True)
