"""The span builders' guards (actors/tracing.py): what a provider or a model says that is meant
to be a code reaches a span only as a short word, a trace id is the run's ULID, and a derived
span id is stable and never zero."""

from __future__ import annotations

from ulid import ULID

from actors.runs.state import RunState
from actors.runs.trace import turn_span
from actors.tracing import code, run_span_id, stream_span_id, trace_id
from events import new_id
from events.catalog import RunTurnCompleted


def test_a_code_is_a_short_word_or_other() -> None:
    assert code("stop") == "stop"
    assert code("tool_calls") == "tool_calls"
    assert code("meta-llama/Llama-3.2-3B-Instruct:q4") == "meta-llama/Llama-3.2-3B-Instruct:q4"
    assert code("") == "" and code(None) == ""
    assert code("stop because the user said hunter2") == "other"
    assert code("x" * 65) == "other"
    assert code("stop\nsecret") == "other"
    assert code('{"text": 1}') == "other"


def test_a_turn_span_carries_no_text_a_provider_put_in_a_code() -> None:
    run_id = new_id()
    state = RunState(
        run_id=run_id, session_id=new_id(), principal="user:ann", channel=None, text="hi"
    )
    completed = RunTurnCompleted(
        run_id=run_id,
        turn=1,
        prompt_tokens=3,
        completion_tokens=4,
        tool_calls=0,
        finish_reason="stop: the password is TraceCanaryFinish",
        model="gpt with TraceCanaryModel inside",
    )
    span = turn_span(
        state,
        1,
        span_id=7,
        provider="openai",
        start_ns=1,
        end_ns=2,
        completed=completed,
        output_chars=10,
    )
    assert span.attributes["reel.turn.finish_reason"] == "other"
    assert span.attributes["gen_ai.response.model"] == "other"
    assert "TraceCanary" not in repr(span)
    assert span.parent_id == run_span_id(run_id)


def test_ids_derive_from_the_run() -> None:
    run_id = new_id()
    assert trace_id(run_id) == int(ULID.from_str(run_id))
    assert trace_id("not-a-ulid") == trace_id("not-a-ulid") != 0
    assert run_span_id(run_id) == stream_span_id(f"run/{run_id}") != 0
    assert stream_span_id(f"tool/{run_id}") != run_span_id(run_id)
