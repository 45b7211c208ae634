"""The context assembler (``actors.runs.context``): the model's input built from folded state.
Pure functions on values; the turn cache is given a tiny fake reader instead of a journal."""

from __future__ import annotations

from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.aggregate import fold
from actors.provider import ChatMessage, ToolCall
from actors.runs import context
from actors.runs import state as run_fold
from actors.runs.context import (
    CUT_NOTE,
    EVIDENCE_TERMS,
    MAX_PRIOR_RUNS,
    Prior,
    TurnCache,
    estimate_messages,
    injected_by,
    model_input,
    prior_of,
    tool_content,
)
from actors.runs.state import RunState, start
from actors.sessions.state import Compaction
from actors.stream import Recorded
from events import JournalReadPort
from events.catalog import (
    Event,
    RunAccepted,
    RunCompleted,
    RunFailed,
    RunOutput,
    RunStarted,
    RunTurnCompleted,
    ToolCompleted,
    ToolProposed,
    kind_of,
)

RUN = "r1"
RUN_STREAM = f"run/{RUN}"
SYSTEM = "You are reel."
PRIOR = (
    ChatMessage(role="user", content="earlier question"),
    ChatMessage(role="assistant", content="earlier answer"),
)
ACCEPTED = RunAccepted(run_id=RUN, session_id="s1", text="list files, token [REDACTED]")
C1 = ToolCall(id="c1", name="fs.list", arguments='{"path": "."}')
C2 = ToolCall(id="c2", name="shell", arguments='{"cmd": "wc"}')
C3 = ToolCall(id="c3", name="echo", arguments="{}")


def on_run(event: Event) -> Recorded:
    return Recorded(event, RUN_STREAM, 0)


def turn(n: int, text: str, *calls: ToolCall) -> list[Recorded]:
    return [
        on_run(RunOutput(run_id=RUN, turn=n, text=text)),
        on_run(
            RunTurnCompleted(
                run_id=RUN,
                turn=n,
                prompt_tokens=1,
                completion_tokens=1,
                tool_calls=len(calls),
                finish_reason="tool_calls" if calls else "stop",
                calls=tuple({"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls),
            )
        ),
    ]


def result(c: ToolCall, output: str = "", **fields: object) -> list[Recorded]:
    invocation = f"i-{c.id}"
    stream = f"tool/{invocation}"
    return [
        Recorded(
            ToolProposed(
                invocation_id=invocation,
                run_id=RUN,
                session_id="s1",
                call_id=c.id,
                tool=c.name,
                arguments={},
            ),
            stream,
            0,
        ),
        Recorded(
            ToolCompleted(
                invocation_id=invocation,
                run_id=RUN,
                tool=c.name,
                ok=bool(fields.pop("ok", True)),
                output=output,
                **fields,  # type: ignore[arg-type]
            ),
            stream,
            0,
        ),
    ]


def state_of(*parts: list[Recorded]) -> RunState:
    started = on_run(RunStarted(run_id=RUN, max_turns=5, max_tool_calls=5, wall_clock_s=60))
    tape = [started, *(rec for part in parts for rec in part)]
    state = fold(run_fold, tape, start(ACCEPTED, "alice"))
    assert state is not None
    return state


def tool_message(c: ToolCall, content: str) -> ChatMessage:
    return ChatMessage(role="tool", content=content, tool_call_id=c.id, name=c.name)


# --- tool_content -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        (ToolCompleted(invocation_id="i", run_id=RUN, tool="t", ok=True, output="out"), "out"),
        (
            ToolCompleted(
                invocation_id="i", run_id=RUN, tool="t", ok=True, output="o", truncated=True
            ),
            "o\n[output truncated]",
        ),
        (
            ToolCompleted(
                invocation_id="i",
                run_id=RUN,
                tool="t",
                ok=False,
                output="partial",
                error="denied by alice",
                error_kind="denied",
            ),
            "error (denied): denied by alice",
        ),
    ],
    ids=["ok", "truncated", "error"],
)
def test_tool_content(done: ToolCompleted, expected: str) -> None:
    assert tool_content(done) == expected


# --- model_input ------------------------------------------------------------------------------


def test_a_fresh_run_sees_system_prior_and_its_message() -> None:
    assert model_input(SYSTEM, Prior(messages=PRIOR), state_of(), 100) == (
        ChatMessage(role="system", content=SYSTEM),
        *PRIOR,
        ChatMessage(role="user", content="list files, token [REDACTED]"),
    )


def test_each_turn_with_calls_adds_the_assistant_message_and_the_results_in_call_order() -> None:
    state = state_of(
        turn(1, "Let me look. ", C1, C2),
        result(C1, "a\nb"),
        result(C2, "", ok=False, error="exit 1", error_kind="failed"),
        turn(2, "One more.", C3),
        result(C3, "hi"),
    )
    assert model_input(SYSTEM, Prior(messages=PRIOR), state, 100) == (
        ChatMessage(role="system", content=SYSTEM),
        *PRIOR,
        ChatMessage(role="user", content=ACCEPTED.text),
        ChatMessage(role="assistant", content="Let me look. ", tool_calls=(C1, C2)),
        tool_message(C1, "a\nb"),
        tool_message(C2, "error (failed): exit 1"),
        ChatMessage(role="assistant", content="One more.", tool_calls=(C3,)),
        tool_message(C3, "hi"),
    )


def test_tool_messages_follow_the_calls_not_the_completion_order() -> None:
    state = state_of(turn(1, "", C1, C2), result(C2, "two"), result(C1, "one"))
    messages = model_input(SYSTEM, Prior(), state, 100)
    assert messages[-2:] == (tool_message(C1, "one"), tool_message(C2, "two"))


def test_a_call_without_a_result_yet_has_no_tool_message() -> None:
    state = state_of(turn(1, "x", C1, C2), result(C1, "one"))
    messages = model_input(SYSTEM, Prior(), state, 100)
    assert messages[-2:] == (
        ChatMessage(role="assistant", content="x", tool_calls=(C1, C2)),
        tool_message(C1, "one"),
    )


def test_a_turn_without_calls_adds_nothing() -> None:
    with_calls = state_of(turn(1, "look", C1), result(C1, "one"))
    answered = state_of(turn(1, "look", C1), result(C1, "one"), turn(2, "the answer"))
    assert len(answered.turns) == 2
    assert model_input(SYSTEM, Prior(), answered, 100) == model_input(
        SYSTEM, Prior(), with_calls, 100
    )
    assert model_input(SYSTEM, Prior(), state_of(turn(1, "hi")), 100) == model_input(
        SYSTEM, Prior(), state_of(), 100
    )


def test_output_of_the_turn_in_progress_is_not_sent() -> None:
    state = state_of(turn(1, "look", C1), result(C1, "one"), turn(2, "half")[:1])
    assert all("half" not in m.content for m in model_input(SYSTEM, Prior(), state, 100))


@pytest.mark.parametrize(
    ("output", "cap", "expected"),
    [
        ("abcdef", 6, "abcdef"),
        ("abcdefg", 6, "abcdef" + CUT_NOTE),
        ("abc", 0, CUT_NOTE),
    ],
    ids=["at-the-cap", "over", "zero-cap"],
)
def test_results_over_the_cap_are_cut_with_the_note(output: str, cap: int, expected: str) -> None:
    state = state_of(turn(1, "", C1), result(C1, output))
    assert model_input(SYSTEM, Prior(), state, cap)[-1] == tool_message(C1, expected)


def test_the_cap_applies_to_what_the_model_is_told() -> None:
    state = state_of(turn(1, "", C1), result(C1, "", ok=False, error="x" * 20, error_kind="e"))
    content = model_input(SYSTEM, Prior(), state, 10)[-1].content
    assert content == "error (e):" + CUT_NOTE


def test_same_state_same_input() -> None:
    parts = [turn(1, "a", C1, C2), result(C1, "1"), result(C2, "2"), turn(2, "b", C3)]
    live, resumed = state_of(*parts), state_of(*parts)
    assert live == resumed
    assert model_input(SYSTEM, Prior(messages=PRIOR), live, 50) == model_input(
        SYSTEM, Prior(messages=PRIOR), resumed, 50
    )
    assert model_input(SYSTEM, Prior(messages=PRIOR), live, 50) == model_input(
        SYSTEM, Prior(messages=PRIOR), live, 50
    )


# --- prior_of ---------------------------------------------------------------------------------


def test_prior_of() -> None:
    history = ("a", "b", "c")
    assert prior_of(history, "c") == ("a", "b")
    assert prior_of(history, "a") == ()
    assert prior_of(history, "zz") == history  # a run not (yet) in the history sees all of it


# --- TurnCache --------------------------------------------------------------------------------


class _Stored:
    def __init__(self, event: Event) -> None:
        self.kind = kind_of(event)
        self._event = event

    def decode(self) -> Event:
        return self._event


class _Reader:
    """Only what ``TurnCache`` reads: a run's tape by correlation id."""

    def __init__(self, tapes: dict[str, list[Event]]) -> None:
        self.tapes = tapes
        self.reads: list[str] = []

    def read_correlated(self, correlation_id: str, after_position: int = 0) -> list[_Stored]:
        self.reads.append(correlation_id)
        return [_Stored(e) for e in self.tapes.get(correlation_id, [])]


def _reader(tapes: dict[str, list[Event]]) -> tuple[_Reader, JournalReadPort]:
    reader = _Reader(tapes)
    return reader, cast(JournalReadPort, reader)


def _pair(text: str, answer: str) -> tuple[ChatMessage, ChatMessage]:
    return ChatMessage(role="user", content=text), ChatMessage(role="assistant", content=answer)


def test_turn_cache_serves_finished_runs_without_reading() -> None:
    cache = TurnCache()
    cache.finished("r1", "q1", "a1")
    cache.finished("r2", "q2", None)  # failed: no answer, not replayed
    cache.finished("r3", "q3", "a3")
    fake, reader = _reader({})
    assert cache.prior(reader, ("r1", "r2", "r3")).messages == (
        *_pair("q1", "a1"),
        *_pair("q3", "a3"),
    )
    assert fake.reads == []


def test_turn_cache_loads_what_it_does_not_hold_and_keeps_it() -> None:
    fake, reader = _reader(
        {
            "r1": [
                RunAccepted(run_id="r1", session_id="s", text="q1"),
                RunCompleted(run_id="r1", answer="a1"),
            ],
            "r2": [
                RunAccepted(run_id="r2", session_id="s", text="q2"),
                RunFailed(run_id="r2", reason="max_turns"),
            ],
        }
    )
    cache = TurnCache()
    assert cache.prior(reader, ("r1", "r2")).messages == _pair("q1", "a1")
    assert cache.prior(reader, ("r1", "r2")).messages == _pair("q1", "a1")
    assert sorted(fake.reads) == ["r1", "r2"]  # both ended: read once


def test_turn_cache_reloads_runs_that_had_not_finished() -> None:
    tapes: dict[str, list[Event]] = {"r1": [RunAccepted(run_id="r1", session_id="s", text="q1")]}
    fake, reader = _reader(tapes)
    cache = TurnCache()
    cache.accepted("r1", "q1")
    assert cache.prior(reader, ("r1",)).messages == ()
    tapes["r1"].append(RunCompleted(run_id="r1", answer="a1"))
    assert cache.prior(reader, ("r1",)).messages == _pair("q1", "a1")
    assert cache.prior(reader, ("r1",)).messages == _pair("q1", "a1")
    assert fake.reads == ["r1", "r1"]


def test_turn_cache_replays_only_the_most_recent_runs() -> None:
    cache = TurnCache()
    history = tuple(f"r{i}" for i in range(MAX_PRIOR_RUNS + 5))
    for run_id in history:
        cache.finished(run_id, f"q-{run_id}", f"a-{run_id}")
    _, reader = _reader({})
    messages = cache.prior(reader, history).messages
    assert len(messages) == 2 * MAX_PRIOR_RUNS
    assert messages[0].content == "q-r5"
    assert messages[-1].content == f"a-r{MAX_PRIOR_RUNS + 4}"


def test_turn_cache_keeps_at_most_its_capacity() -> None:
    cache = TurnCache(capacity=2)
    for n in (1, 2, 3):
        cache.finished(f"r{n}", f"q{n}", f"a{n}")
    fake, reader = _reader({})
    assert cache.prior(reader, ("r2", "r3")).messages == (*_pair("q2", "a2"), *_pair("q3", "a3"))
    assert fake.reads == []
    assert cache.prior(reader, ("r1",)).messages == ()  # dropped, and the journal has nothing
    assert fake.reads == ["r1"]


def test_turn_cache_drops_the_least_recently_used() -> None:
    cache = TurnCache(capacity=2)
    cache.finished("r1", "q1", "a1")
    cache.finished("r2", "q2", "a2")
    fake, reader = _reader({})
    cache.prior(reader, ("r1",))  # r1 is now the most recently used
    cache.finished("r3", "q3", "a3")  # so r2 is the one to drop
    assert cache.prior(reader, ("r1", "r3")).messages == (*_pair("q1", "a1"), *_pair("q3", "a3"))
    assert fake.reads == []


@pytest.mark.parametrize(
    ("final", "evidence", "terms", "min_evidence", "expected"),
    [
        (0.35, 0.0, 0, 2.0, "score"),  # at the score: by score, whatever the words
        (0.34, 2.0, EVIDENCE_TERMS, 2.0, "words"),
        (0.34, 1.99, 5, 2.0, None),  # the words weigh too little
        (0.34, 9.0, EVIDENCE_TERMS - 1, 2.0, None),  # one word, however rare
        (0.34, 9.0, 5, 0.0, None),  # the second rule off
        (0.0, 0.0, 0, 2.0, None),
    ],
)
def test_a_memory_hit_is_injected_by_its_score_or_by_its_words(
    final: float, evidence: float, terms: int, min_evidence: float, expected: str | None
) -> None:
    assert injected_by(final, evidence, terms, 0.35, min_evidence) == expected


def test_turn_cache_assembles_a_settled_history_once_per_window_and_budget() -> None:
    cache = TurnCache()
    for n in (1, 2):
        cache.finished(f"r{n}", f"q{n}", f"a{n}")
    _, reader = _reader({})
    first = cache.prior(reader, ("r1", "r2"))
    assert cache.prior(reader, ("r1", "r2")) is first
    cut = cache.prior(reader, ("r1", "r2"), budget_tokens=_pair_cost())
    assert cut is not first and cut.messages == _pair("q2", "a2") and cut.dropped == 1
    cache.finished("r3", "q3", "a3")
    assert cache.prior(reader, ("r1", "r2", "r3")).messages[-2:] == _pair("q3", "a3")


def _pair_cost() -> int:
    """What one of the pairs above costs against a budget."""
    return estimate_messages(_pair("q2", "a2"))


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["completed", "failed", "live"]),
            st.text(max_size=30),
            st.integers(min_value=0, max_value=60),
            st.integers(min_value=0, max_value=7),
        ),
        min_size=1,
        max_size=14,
    )
)
def test_turn_cache_extending_a_history_equals_assembling_it_afresh(
    steps: list[tuple[str, str, int, int]],
) -> None:
    """A session's history grows a run at a time and its prior is made from the one before:
    whatever the runs' ends (a run still live at one ask and ended at the next), the budgets
    (fitting, cut, zero), a compaction covering older runs and the window sliding past its
    limit, every answer equals the one a fresh cache assembles from the journal alone."""
    tapes: dict[str, list[Event]] = {}
    _, reader = _reader(tapes)
    cache = TurnCache()
    history: tuple[str, ...] = ()
    live: list[str] = []
    compaction = None
    window = 5
    for n, (end, text, budget, covered) in enumerate(steps):
        for run_id in live:  # what was live at the last ask has ended since
            tapes[run_id].append(RunCompleted(run_id=run_id, answer=f"late {run_id}"))
            cache.finished(run_id, tapes[run_id][0].text, f"late {run_id}")  # type: ignore[attr-defined]
        live = []
        run_id = f"r{n}"
        history += (run_id,)
        tapes[run_id] = [RunAccepted(run_id=run_id, session_id="s", text=text)]
        cache.accepted(run_id, text)
        if end == "completed":
            tapes[run_id].append(RunCompleted(run_id=run_id, answer=text[::-1]))
            cache.finished(run_id, text, text[::-1])
        elif end == "failed":
            tapes[run_id].append(RunFailed(run_id=run_id, reason="max_turns"))
            cache.finished(run_id, text, None)
        else:
            live.append(run_id)
        if covered and covered < len(history) and n % 4 == 3:
            # Older runs, and (the contract is "leaves the covered runs out") the next one.
            covers = (*history[:covered], f"r{n + 1}")
            compaction = Compaction(compaction_id=f"c{n}", summary="s" * covered, covers=covers)
        for budget_tokens in (None, budget, 0):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(context, "MAX_PRIOR_RUNS", window)
                got = cache.prior(reader, history, compaction, budget_tokens)
                fresh = TurnCache().prior(reader, history, compaction, budget_tokens)
            assert got == fresh, (n, budget_tokens)
            assert got.tokens == estimate_messages(got.messages)
