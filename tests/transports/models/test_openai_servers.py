"""The "Known server differences" of docs/providers.md, row by row, on the wire: the fake server
sends (or refuses) what each real server does, and the provider copes as the table says.

What the run then does with a call that cannot be made (a turn cut off at ``length``, arguments
that are not JSON) is in test_openai_runs.py, against a real node.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from actors.provider import (
    ChatMessage,
    ProviderRequest,
    TextDelta,
    ToolCall,
    ToolDefinition,
    TurnEnd,
    Usage,
)
from tests.transports.models.test_openai_provider import (
    READ_TOOL,
    TIME_TOOL,
    config,
    stream_all,
    stream_error,
)

ECHO_TOOL = ToolDefinition(
    name="echo",
    description="Echo the arguments.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
)
ASK = ProviderRequest(
    messages=(ChatMessage(role="user", content="read notes and tell the time"),),
    tools=(READ_TOOL, TIME_TOOL, ECHO_TOOL),
)
AFTER_A_CALL = ProviderRequest(
    messages=(
        ChatMessage(role="user", content="echo ping"),
        ChatMessage(
            role="assistant",
            tool_calls=(ToolCall(id="call_1", name="echo", arguments='{"text": "ping"}'),),
        ),
        ChatMessage(role="tool", content='{"text":"ping"}', tool_call_id="call_1", name="echo"),
    ),
    tools=(ECHO_TOOL,),
)


def calls_of(events: list[Any]) -> list[ToolCall]:
    return [e for e in events if isinstance(e, ToolCall)]


# --- llama-cpp-python -------------------------------------------------------------------------


def test_llama_cpp_python_repeating_the_name_and_id_in_every_fragment_is_one_call(
    fake_openai: Any,
) -> None:
    pieces = ['{"text', '": "pi', 'ng"', "}"]
    call_id = "call__0_echo_cmpl-5e4f"
    fake_openai.queue(
        fake_openai.reply(pieces=fake_openai.llama_cpp_python_tool_stream("echo", call_id, pieces))
    )

    events = stream_all(config(fake_openai), ASK)

    assert events == [
        ToolCall(id=call_id, name="echo", arguments='{"text": "ping"}'),
        TurnEnd(finish_reason="tool_calls"),  # and no usage: it sends none while streaming
    ]


def test_llama_cpp_python_cut_arguments_finish_as_tool_calls_and_come_out_as_sent(
    fake_openai: Any,
) -> None:
    # max_tokens cut the arguments; the server still says tool_calls. The provider passes the
    # text on as the model wrote it: the run refuses it (test_openai_runs.py).
    pieces = ['{"text', '": "pi']
    stream = fake_openai.llama_cpp_python_tool_stream("echo", "call__0_echo_x", pieces)
    fake_openai.queue(fake_openai.reply(pieces=stream))

    events = stream_all(config(fake_openai), ASK)

    assert events == [
        ToolCall(id="call__0_echo_x", name="echo", arguments='{"text": "pi'),
        TurnEnd(finish_reason="tool_calls"),
    ]


def test_llama_cpp_python_gets_string_content_beside_tool_calls(fake_openai: Any) -> None:
    fake_openai.refuses.add("string_content")  # null or absent: 500

    events = stream_all(config(fake_openai), AFTER_A_CALL)

    assert events[-1] == TurnEnd(finish_reason="stop")
    [recorded] = fake_openai.requests
    assistant = recorded.body["messages"][1]
    assert assistant["role"] == "assistant" and assistant["content"] == ""
    assert assistant["tool_calls"][0]["function"] == {
        "name": "echo",
        "arguments": '{"text": "ping"}',
    }


@pytest.mark.parametrize("content", [{"content": None}, {}], ids=["null", "absent"])
def test_the_fake_refuses_what_llama_cpp_python_refuses(
    fake_openai: Any, content: dict[str, Any]
) -> None:
    # The check above can fail: null or absent content beside tool_calls is refused.
    fake_openai.refuses.add("string_content")
    fake_openai.queue(fake_openai.reply())
    call = {"id": "x", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    body = {"model": "m", "messages": [{"role": "assistant", **content, "tool_calls": [call]}]}
    request = urllib.request.Request(
        f"{fake_openai.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)

    assert refused.value.code == 500
    assert b"Input should be a valid string" in refused.value.read()


def test_llama_cpp_python_whole_completion_reports_usage_and_the_call(fake_openai: Any) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "echo", "arguments": '{"text": "ping"}'},
        "tool_calls": [
            {
                "id": "call__0_echo_cmpl-1",
                "type": "function",
                "function": {"name": "echo", "arguments": '{"text": "ping"}'},
            }
        ],
    }
    fake_openai.queue(fake_openai.completion_reply(message, "tool_calls", 180, 7))

    events = stream_all(config(fake_openai, stream=False), ASK)

    assert events == [
        ToolCall(id="call__0_echo_cmpl-1", name="echo", arguments='{"text": "ping"}'),
        Usage(prompt_tokens=180, completion_tokens=7, model="gpt-test"),
        TurnEnd(finish_reason="tool_calls"),
    ]
    assert fake_openai.requests[0].body["stream"] is False


# --- llama.cpp's llama-server -----------------------------------------------------------------


def test_llama_server_gets_the_configured_max_tokens_so_a_turn_has_an_end(
    fake_openai: Any,
) -> None:
    stream_all(config(fake_openai, max_tokens=256), ASK)

    assert fake_openai.requests[0].body["max_tokens"] == 256


def test_llama_server_refuses_arguments_that_are_not_json_in_the_conversation(
    fake_openai: Any,
) -> None:
    # What the run never sends (it fails first); the fake refuses it as llama-server does.
    fake_openai.refuses.add("bad_arguments")
    cut = ToolCall(id="call_1", name="echo", arguments='{"text": "pi')
    history = (AFTER_A_CALL.messages[0], ChatMessage(role="assistant", tool_calls=(cut,)))

    error = stream_error(
        config(fake_openai, max_retries=0), ProviderRequest(messages=history, tools=(ECHO_TOOL,))
    )

    assert error.status == 500
    assert "Failed to parse tool call arguments as JSON" in str(error)


# --- Ollama -----------------------------------------------------------------------------------


def test_ollama_calls_all_at_index_zero_are_told_apart_by_id(fake_openai: Any) -> None:
    calls = [("call_a1", "fs__read", '{"path": "a"}'), ("call_b2", "time__now", "{}")]
    fake_openai.queue(fake_openai.reply(pieces=fake_openai.ollama_tool_stream(calls)))

    events = stream_all(config(fake_openai), ASK)

    assert events == [
        ToolCall(id="call_a1", name="fs.read", arguments='{"path": "a"}'),
        ToolCall(id="call_b2", name="time.now", arguments="{}"),
        Usage(prompt_tokens=30, completion_tokens=9, model="gpt-test"),
        TurnEnd(finish_reason="tool_calls"),
    ]


def test_ollama_calls_without_index_ending_stop_are_still_calls(fake_openai: Any) -> None:
    calls = [("call_a1", "fs__read", '{"path": "a"}'), ("call_b2", "fs__read", '{"path": "b"}')]
    stream = fake_openai.ollama_tool_stream(calls, index=False, finish="stop")
    fake_openai.queue(fake_openai.reply(pieces=stream))

    events = stream_all(config(fake_openai), ASK)

    assert calls_of(events) == [
        ToolCall(id="call_a1", name="fs.read", arguments='{"path": "a"}'),
        ToolCall(id="call_b2", name="fs.read", arguments='{"path": "b"}'),
    ]
    assert events[-1] == TurnEnd(finish_reason="stop")


# --- vLLM -------------------------------------------------------------------------------------


def test_vllm_without_tool_flags_is_a_clear_error_that_is_not_retried(fake_openai: Any) -> None:
    error_body = {
        "object": "error",
        "message": '"auto" tool choice requires --enable-auto-tool-choice and '
        "--tool-call-parser to be set",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    fake_openai.queue(fake_openai.reply(status=400, body=json.dumps(error_body).encode()))

    error = stream_error(config(fake_openai), ASK)

    assert (error.status, error.retryable) == (400, False)
    assert str(error) == (
        'provider returned 400: "auto" tool choice requires --enable-auto-tool-choice and '
        "--tool-call-parser to be set"
    )
    assert len(fake_openai.requests) == 1


# --- OpenAI, and what every server gets -------------------------------------------------------


def test_openai_name_fragments_are_joined(fake_openai: Any) -> None:
    # The specification allows a name in pieces; no server seen does it, but it reads right.
    chunk = fake_openai.chunk
    stream = [
        chunk({"tool_calls": [{"index": 0, "id": "call_9", "function": {"name": "fs__"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "read", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        fake_openai.DONE,
    ]
    fake_openai.queue(fake_openai.reply(pieces=stream))

    events = stream_all(config(fake_openai), ASK)

    assert calls_of(events) == [ToolCall(id="call_9", name="fs.read", arguments="{}")]


def test_a_text_answer_before_a_call_is_kept(fake_openai: Any) -> None:
    chunk = fake_openai.chunk
    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "echo"}}
    stream = [
        chunk({"role": "assistant", "content": "Let me check. "}),
        chunk({"tool_calls": [opening]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        fake_openai.DONE,
    ]
    fake_openai.queue(fake_openai.reply(pieces=stream))

    events = stream_all(config(fake_openai), ASK)

    assert events == [
        TextDelta(text="Let me check. "),
        ToolCall(id="call_1", name="echo", arguments="{}"),
        TurnEnd(finish_reason="tool_calls"),
    ]


# --- the table itself -------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[3] / "docs" / "providers.md"
PREFIXES = {
    "OpenAI": "test_openai_",
    "llama.cpp `llama-server`": "test_llama_server_",
    "llama-cpp-python (`python -m llama_cpp.server`)": "test_llama_cpp_python_",
    "vLLM": "test_vllm_",
    "Ollama (`/v1/chat/completions`)": "test_ollama_",
}


def test_every_row_of_the_known_server_differences_is_tested_here() -> None:
    section = DOC.read_text().split("### Known server differences", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (?!server |---)([^|]+?) \|", section, re.MULTILINE)
    tests = [name for name in globals() if name.startswith("test_")]

    assert sorted(rows) == sorted(PREFIXES)
    for row in rows:
        assert any(t.startswith(PREFIXES[row]) for t in tests), f"no test for the {row} row"
