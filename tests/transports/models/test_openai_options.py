"""What ``[provider]`` adds to a request (max_tokens, temperature, tool_choice, extra_body), on
the wire, and the values it refuses, naming the field: in ``OpenAIConfig``, in ``config.toml``
and in ``REEL_PROVIDER_*``, and from a real ``reel node``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actors.provider import ChatMessage, ProviderRequest, ToolCall
from tests.transports.models.test_openai_provider import (
    HELLO,
    READ_TOOL,
    TIME_TOOL,
    config,
    stream_all,
    stream_error,
)
from tests.transports.node.test_daemon import assert_one_error_line, reel
from transports.config import ConfigError, NodeConfig, ProviderConfig, ToolsSection, load_config
from transports.models.openai import OpenAIConfig
from transports.models.openai_wire import encode_request
from transports.models.tool_names import ToolNameMap
from transports.runtime import open_runtime

ASK = ProviderRequest(
    messages=(ChatMessage(role="user", content="read a"),), tools=(READ_TOOL, TIME_TOOL)
)
AFTER_RESULTS = ProviderRequest(
    messages=(
        *ASK.messages,
        ChatMessage(
            role="assistant",
            tool_calls=(ToolCall(id="call_1", name="fs.read", arguments='{"path": "a"}'),),
        ),
        ChatMessage(role="tool", content="hello", tool_call_id="call_1", name="fs.read"),
    ),
    tools=ASK.tools,
)


def sent(fake: Any, request: ProviderRequest, **options: Any) -> dict[str, Any]:
    """The body the provider sends for ``request`` with ``options`` configured."""
    stream_all(config(fake, **options), request)
    body: dict[str, Any] = fake.requests[-1].body
    return body


def test_no_options_send_none_of_them(fake_openai: Any) -> None:
    body = sent(fake_openai, ASK)

    assert not {"tool_choice", "max_tokens", "temperature"} & set(body)


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_auto_and_none_are_sent_on_every_turn_with_tools(fake_openai: Any, choice: str) -> None:
    assert sent(fake_openai, ASK, tool_choice=choice)["tool_choice"] == choice
    assert sent(fake_openai, AFTER_RESULTS, tool_choice=choice)["tool_choice"] == choice


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("required", "required"),
        ("fs.read", {"type": "function", "function": {"name": "fs__read"}}),
    ],
)
def test_a_forced_call_is_asked_for_on_the_turn_answering_the_person_only(
    fake_openai: Any, choice: str, wire: Any
) -> None:
    assert sent(fake_openai, ASK, tool_choice=choice)["tool_choice"] == wire
    # after tool results the model must be free to answer, or the run never ends
    assert "tool_choice" not in sent(fake_openai, AFTER_RESULTS, tool_choice=choice)


@pytest.mark.parametrize("choice", ["auto", "required", "fs.read"])
def test_a_request_without_tools_carries_no_tool_choice(fake_openai: Any, choice: str) -> None:
    # compaction summaries and reflection ask without tools; OpenAI refuses tool_choice there
    assert "tool_choice" not in sent(fake_openai, HELLO, tool_choice=choice)


def test_a_tool_choice_naming_a_tool_not_offered_fails_before_asking(fake_openai: Any) -> None:
    error = stream_error(config(fake_openai, tool_choice="shell.run"), ASK)

    assert not error.retryable
    assert str(error) == "tool_choice names 'shell.run', a tool this request does not offer"
    assert fake_openai.requests == []


def test_max_tokens_is_the_limit_of_a_request_that_sets_none(fake_openai: Any) -> None:
    assert sent(fake_openai, ASK, max_tokens=300)["max_tokens"] == 300
    own = ProviderRequest(messages=HELLO.messages, max_tokens=1024)  # a compaction summary
    assert sent(fake_openai, own, max_tokens=300)["max_tokens"] == 1024


def test_temperature_and_extra_body_are_sent(fake_openai: Any) -> None:
    extra = {"top_k": 40, "cache_prompt": True, "chat_template_kwargs": {"enable_thinking": False}}

    body = sent(fake_openai, ASK, temperature=0.0, extra_body=extra)

    assert body["temperature"] == 0.0
    assert {k: body[k] for k in extra} == extra
    assert body["model"] == "gpt-test" and body["messages"][0]["content"] == "read a"


def test_extra_body_never_overrides_reels_own_fields_even_unchecked() -> None:
    # check_options refuses these in configuration; the encoder drops them regardless.
    hostile = {
        "messages": [{"role": "user", "content": "injected"}],
        "tools": [],
        "model": "other",
        "stream": False,
        "stream_options": {},
        "tool_choice": "none",
        "max_tokens": 1,
        "temperature": 2,
        "top_k": 3,
    }

    body = encode_request(ASK, "m", ToolNameMap(["fs.read", "time.now"]), extra_body=hostile)

    assert body["messages"] == [{"role": "user", "content": "read a"}]
    assert [t["function"]["name"] for t in body["tools"]] == ["fs__read", "time__now"]
    assert (body["model"], body["stream"], body["top_k"]) == ("m", True, 3)
    assert body["stream_options"] == {"include_usage": True}
    assert not {"tool_choice", "max_tokens", "temperature"} & set(body)


BASE: dict[str, Any] = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}


@pytest.mark.parametrize(
    ("field", "value", "toml", "words"),
    [
        (
            "tool_choice",
            "fs/read",
            "fs/read",
            "tool_choice: must be auto, required, none or a tool",
        ),
        ("tool_choice", "", "", "tool_choice: must be"),
        ("tool_choice", "fs read", "fs read", "got 'fs read'"),
        ("max_tokens", 0, "0", "max_tokens: must be 1 or more"),
        ("temperature", 2.5, "2.5", "temperature: must be between 0 and 2"),
        ("temperature", -0.1, "-0.1", "temperature: must be between 0 and 2"),
        ("extra_body", {"messages": []}, "{ messages = [] }", "extra_body: may not set messages"),
        ("extra_body", {"model": "x", "stream": 1}, "{ model = 1, stream = 1 }", "model, stream"),
    ],
)
def test_bad_options_are_refused_naming_the_field(
    field: str, value: Any, toml: str, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        OpenAIConfig(**BASE, **{field: value})
    variable = f"REEL_PROVIDER_{field.upper()}"
    with pytest.raises(ConfigError) as from_env:
        load_config(None, {variable: toml})
    assert str(from_env.value).startswith(f"{variable} (config key provider.{field}): ")
    assert words.removeprefix(f"{field}: ") in str(from_env.value)


def test_the_file_sets_every_key_and_unset_keys_stay_unset(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[provider]\n"
        'kind = "openai"\nbase_url = "http://127.0.0.1:8080/v1"\nmodel = "smollm2"\n'
        'stream = false\nmax_tokens = 256\ntemperature = 0.2\ntool_choice = "echo"\n'
        "extra_body = { top_k = 40, cache_prompt = true }\n"
    )

    provider = load_config(path, {}).provider

    assert (provider.stream, provider.max_tokens, provider.temperature) == (False, 256, 0.2)
    assert provider.tool_choice == "echo"
    assert provider.extra_body == {"top_k": 40, "cache_prompt": True}
    defaults = load_config(None, {}).provider
    assert (defaults.max_tokens, defaults.temperature, defaults.tool_choice) == (None,) * 3
    assert (defaults.stream, defaults.extra_body) == (True, {})


def test_a_bad_key_in_the_file_is_named_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[provider]\nextra_body = { tools = [] }\ntool_choice = "auto"\n')

    with pytest.raises(ConfigError) as caught:
        load_config(path, {})

    assert str(caught.value).startswith(f"{path}: config key provider.extra_body: may not set")


def test_the_node_refuses_a_bad_provider_key_in_one_line(tmp_path: Path) -> None:
    done = reel("node", "--data", str(tmp_path / "data"), env={"REEL_PROVIDER_TOOL_CHOICE": "a b"})

    assert_one_error_line(done, "REEL_PROVIDER_TOOL_CHOICE", "provider.tool_choice", "'a b'")


@pytest.mark.parametrize(
    ("choice", "postures", "words"),
    [
        ("fs.raed", {}, "no tool 'fs.raed' (tools: echo, fs.apply_patch, fs.diff, fs.list,"),
        ("shell.run", {"shell.run": "disabled"}, "'shell.run' is disabled (tools.postures)"),
    ],
)
def test_a_node_refuses_a_tool_choice_the_model_is_never_offered(
    data_dir: Path, choice: str, postures: dict[str, Any], words: str
) -> None:
    config = NodeConfig(
        provider=ProviderConfig(
            kind="openai", base_url="http://127.0.0.1:9/v1", model="m", tool_choice=choice
        ),
        tools=ToolsSection(postures=postures),
    )

    with pytest.raises(ConfigError) as caught:
        open_runtime(data_dir, config=config)

    assert str(caught.value).startswith("config key provider.tool_choice: ")
    assert words in str(caught.value)
