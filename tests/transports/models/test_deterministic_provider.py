"""DeterministicProvider: echo, directives, ids, token counts, final answers, cancellation."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from actors.provider import (
    ChatMessage,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
    ToolCall,
    TurnEnd,
    Usage,
)
from transports.models.deterministic import DeterministicProvider, parse_script


def user(content: str) -> ChatMessage:
    return ChatMessage(role="user", content=content)


def run(
    request: ProviderRequest, provider: DeterministicProvider | None = None
) -> list[ProviderEvent]:
    async def main() -> list[ProviderEvent]:
        async with aclosing((provider or DeterministicProvider()).stream(request)) as stream:
            return [event async for event in stream]

    return asyncio.run(main())


def ask(*messages: ChatMessage) -> list[ProviderEvent]:
    return run(ProviderRequest(messages=messages))


def text_of(events: list[ProviderEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_plain_text_is_echoed_word_by_word() -> None:
    events = ask(user("hello  brave\nnew world"))

    assert events == [
        TextDelta(text="hello  "),
        TextDelta(text="brave\n"),
        TextDelta(text="new "),
        TextDelta(text="world"),
        Usage(prompt_tokens=4, completion_tokens=4),
        TurnEnd(finish_reason="stop"),
    ]


def test_prompt_tokens_count_words_of_every_message() -> None:
    events = ask(
        ChatMessage(role="system", content="you are a test double"),
        user("one two three"),
        ChatMessage(role="assistant", content="four five"),
        user("six"),
    )

    [usage] = [e for e in events if isinstance(e, Usage)]
    assert usage == Usage(prompt_tokens=11, completion_tokens=1)
    assert text_of(events) == "six"


def test_no_plain_text_and_no_tools_answers_ack() -> None:
    events = ask(user("/sleep 0\n   \n"))

    assert events == [
        TextDelta(text="ack"),
        Usage(prompt_tokens=2, completion_tokens=1),
        TurnEnd(finish_reason="stop"),
    ]


def test_tool_lines_propose_calls_with_no_text() -> None:
    events = ask(user('read both\n/tool fs.read {"path": "a.txt"}\n/tool time.now'))

    assert events == [
        ToolCall(id="call_1", name="fs.read", arguments='{"path": "a.txt"}'),
        ToolCall(id="call_2", name="time.now", arguments="{}"),
        Usage(prompt_tokens=8, completion_tokens=5),
        TurnEnd(finish_reason="tool_calls"),
    ]


def test_invalid_json_arguments_pass_through_verbatim() -> None:
    events = ask(user("/tool fs.read {not json"))

    assert events[0] == ToolCall(id="call_1", name="fs.read", arguments="{not json")


def test_call_ids_continue_across_the_conversation() -> None:
    earlier = ChatMessage(
        role="assistant",
        tool_calls=(
            ToolCall(id="call_1", name="a", arguments="{}"),
            ToolCall(id="call_2", name="b", arguments="{}"),
        ),
    )
    events = ask(
        user("/tool a {}"),
        earlier,
        ChatMessage(role="tool", content="x", tool_call_id="call_1"),
        ChatMessage(role="tool", content="y", tool_call_id="call_2"),
        ChatMessage(role="assistant", content="a -> x"),
        user("/tool c {}"),
    )

    assert events[0] == ToolCall(id="call_3", name="c", arguments="{}")


def test_after_tool_results_answers_text_and_one_line_per_result() -> None:
    calls = (
        ToolCall(id="call_1", name="fs.read", arguments='{"path":"a.txt"}'),
        ToolCall(id="call_2", name="time.now", arguments="{}"),
    )
    events = ask(
        user('Here you go.\n/tool fs.read {"path":"a.txt"}\n/tool time.now {}'),
        ChatMessage(role="assistant", tool_calls=calls),
        ChatMessage(role="tool", content="hello file", tool_call_id="call_1"),
        ChatMessage(role="tool", content="12:00", tool_call_id="call_2", name="clock"),
    )

    assert text_of(events) == "Here you go.\nfs.read -> hello file\nclock -> 12:00"
    assert events[-2:] == [
        Usage(prompt_tokens=12, completion_tokens=10),
        TurnEnd(finish_reason="stop"),
    ]


def test_tool_loop_proposes_the_call_on_every_turn() -> None:
    first = ask(user('/tool-loop builtin.echo {"text": "again"}'))
    assert first[0] == ToolCall(id="call_1", name="builtin.echo", arguments='{"text": "again"}')
    assert first[-1] == TurnEnd(finish_reason="tool_calls")

    later = ask(
        user("/tool-loop builtin.echo {}"),
        ChatMessage(role="assistant", tool_calls=(ToolCall("call_1", "builtin.echo", "{}"),)),
        ChatMessage(role="tool", content="again", tool_call_id="call_1"),
    )
    assert later[0] == ToolCall(id="call_2", name="builtin.echo", arguments="{}")
    assert later[-1] == TurnEnd(finish_reason="tool_calls")


def test_tool_calls_are_proposed_only_on_the_first_turn() -> None:
    events = ask(
        user("/tool builtin.echo {}"),
        ChatMessage(role="assistant", tool_calls=(ToolCall("call_1", "builtin.echo", "{}"),)),
        ChatMessage(role="tool", content="denied by policy", tool_call_id="call_1"),
    )

    assert not [e for e in events if isinstance(e, ToolCall)]
    assert text_of(events) == "builtin.echo -> denied by policy"


def test_fail_raises_a_non_retryable_provider_error() -> None:
    with pytest.raises(ProviderError) as caught:
        ask(user("hello\n/fail upstream exploded"))

    assert str(caught.value) == "upstream exploded"
    assert caught.value.retryable is False
    assert caught.value.status is None


def test_fail_without_message_has_a_default_and_only_fails_the_first_turn() -> None:
    with pytest.raises(ProviderError, match="/fail"):
        ask(user("/fail"))

    later = ask(
        user("/fail\n/tool a {}"),
        ChatMessage(role="assistant", tool_calls=(ToolCall("call_1", "a", "{}"),)),
        ChatMessage(role="tool", content="ok", tool_call_id="call_1"),
    )
    assert later[-1] == TurnEnd(finish_reason="stop")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("/tool", "line 1: /tool needs a tool name"),
        ("ok\n/tool-loop", "line 2: /tool-loop needs a tool name"),
        ("/sleep soon", "line 1: /sleep needs whole milliseconds"),
        ("/sleep -5", "line 1: /sleep needs whole milliseconds"),
    ],
)
def test_malformed_directives_are_clear_errors(content: str, problem: str) -> None:
    with pytest.raises(ProviderError, match=problem):
        ask(user(content))


def test_lines_that_merely_start_with_a_slash_are_plain_text() -> None:
    assert text_of(ask(user("/etc/passwd is a path\n/toolbox too"))) == (
        "/etc/passwd is a path\n/toolbox too"
    )


def test_sleep_is_cancellable() -> None:
    async def main() -> bool:
        provider = DeterministicProvider()
        started = asyncio.Event()

        async def consume() -> None:
            started.set()
            async for _ in provider.stream(ProviderRequest(messages=(user("/sleep 60000"),))):
                pass

        task = asyncio.create_task(consume())
        await started.wait()
        await asyncio.sleep(0.01)
        task.cancel()
        try:
            await asyncio.wait_for(task, 5)
        except asyncio.CancelledError:
            return True
        return False

    assert asyncio.run(main()) is True


def test_sleep_then_answers() -> None:
    assert text_of(ask(user("/sleep 5\nawake"))) == "awake"
    assert parse_script("/sleep 5\n/sleep 7").sleep_ms == 12


def test_max_tokens_cuts_the_answer_and_finishes_with_length() -> None:
    events = run(ProviderRequest(messages=(user("one two three four"),), max_tokens=2))

    assert events == [
        TextDelta(text="one "),
        TextDelta(text="two "),
        Usage(prompt_tokens=4, completion_tokens=2),
        TurnEnd(finish_reason="length"),
    ]


def test_chunk_delay_keeps_the_stream_identical() -> None:
    request = ProviderRequest(messages=(user("slow and steady"),))

    assert run(request, DeterministicProvider(chunk_delay_s=0.001)) == run(request)


def test_negative_chunk_delay_is_rejected() -> None:
    with pytest.raises(ValueError, match="chunk_delay_s"):
        DeterministicProvider(chunk_delay_s=-1)
