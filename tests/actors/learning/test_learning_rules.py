"""Reflection's rules and the candidate's fold and decisions, as docs/learning.md states them:
pure functions, no threads (a real node: tests/transports/test_learning_node.py)."""

from __future__ import annotations

import pytest

from actors.aggregate import fold as aggregate_fold
from actors.learning import state as learning_state
from actors.learning.desk import memory_item_id
from actors.learning.rules import (
    STATEMENT_BPS,
    InvalidReflection,
    Proposal,
    RunDigest,
    candidate_id,
    dedupe_key,
    merged_confidence,
    model_proposals,
    parse_model_answer,
    procedure,
    sentences,
    statements,
)
from actors.learning.state import (
    CandidateConflict,
    CandidateState,
    apply,
    due,
    may_accept,
    may_roll_back,
    observe,
    reject,
    stream_of,
)
from actors.stream import Recorded
from events.catalog import (
    Event,
    LearningCandidateApplied,
    LearningCandidateProposed,
    LearningCandidateRolledBack,
    LearningEvidenceAdded,
)
from projections.learning import PeerRun, content_words, jaccard, similar

ALICE = "user:alice"


def run(text: str, run_id: str = "01J0000000000000000000RUN1", **fields: object) -> RunDigest:
    base: dict[str, object] = {
        "run_id": run_id,
        "principal": ALICE,
        "session_id": "01J00000000000000000000SES",
        "text": text,
        "accepted_position": 7,
        "state": "done",
        "answer": "ok",
    }
    base.update(fields)
    return RunDigest(**base)  # type: ignore[arg-type]


def found(text: str) -> list[tuple[str, str]]:
    return [(p.kind, p.text) for p in statements(run(text))]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Remember that the staging database is db-2.", [("fact", "the staging database is db-2")]),
        ("please remember: deploys happen on Tuesdays", [("fact", "deploys happen on Tuesdays")]),
        ("Note that prod runs PostgreSQL 16!", [("fact", "prod runs PostgreSQL 16")]),
        ("Keep in mind that the VPN is required", [("fact", "the VPN is required")]),
        ("don't forget that Bob is on call", [("fact", "Bob is on call")]),
        ("I prefer short answers.", [("preference", "Prefer short answers")]),
        ("I'd prefer tables over lists", [("preference", "Prefer tables over lists")]),
        ("I would prefer metric units", [("preference", "Prefer metric units")]),
        ("Always answer in French.", [("preference", "Always answer in French")]),
        (
            "please always reply with a summary first",
            [("preference", "Always reply with a summary first")],
        ),
        ("Never use emoji", [("preference", "Never use emoji")]),
        ("ok, remember that the host is db.example.com", [("fact", "the host is db.example.com")]),
        # Anywhere in the message, sentence by sentence; more than one per message.
        (
            "Hi! Remember that staging is db-2. Also, I prefer short answers.",
            [("fact", "staging is db-2"), ("preference", "Prefer short answers")],
        ),
        # Not statements: a question, a rule word in the middle of a sentence, directives.
        ("Do you remember that movie?", []),
        ("I can't remember that at all", []),
        ("what do I prefer?", []),
        ('/tool echo {"text": "remember that x"}', []),
        ("", []),
    ],
)
def test_each_rule_of_the_table(text: str, expected: list[tuple[str, str]]) -> None:
    assert found(text) == expected


def test_a_statement_is_evidenced_by_the_message_that_said_it() -> None:
    (fact,) = statements(run("remember that staging is db-2"))
    assert fact.runs == ("01J0000000000000000000RUN1",) and fact.positions == ((7,),)
    assert fact.confidence_bps == STATEMENT_BPS and fact.principal == ALICE
    assert fact.extractor == "rules"


def test_the_same_statement_twice_in_a_message_is_one_proposal() -> None:
    text = "Remember that staging is db-2. remember that  Staging is db-2!"
    assert len(statements(run(text))) == 1


def test_duplicates_share_a_key_and_an_id_per_principal_and_kind() -> None:
    assert dedupe_key("The  Staging DB is db-2.") == dedupe_key("the staging db is db-2")
    one = candidate_id(ALICE, "fact", dedupe_key("staging is db-2"))
    assert one == candidate_id(ALICE, "fact", "staging is db-2")
    assert one != candidate_id("user:bob", "fact", "staging is db-2")
    assert one != candidate_id(ALICE, "preference", "staging is db-2")
    assert len(one) == 26 and one[0] in "01234567"  # a ULID's shape: the API takes it as an id


def test_sentences_leave_directives_out() -> None:
    assert sentences("hello there. how are you?\n/tool echo {}\nbye") == [
        "hello there.",
        "how are you?",
        "bye",
    ]


def test_content_words_and_similarity() -> None:
    a = content_words("Check the weather in Paris\n/tool echo {}")
    assert a == frozenset({"check", "weather", "paris"})
    b = content_words("check weather for Lyon")
    assert jaccard(a, b) == 0.5 and similar(a, b)
    assert not similar(a, content_words("deploy the staging server"))
    assert not similar(frozenset(), frozenset())


def peer(run_id: str, text: str, position: int) -> PeerRun:
    return PeerRun(
        run_id=run_id,
        accepted_position=position,
        words=content_words(text),
        request=text,
        positions=(position + 3,),
    )


def test_a_procedure_needs_two_completed_runs_with_similar_requests() -> None:
    mine = run(
        "check the weather in Lyon",
        run_id="01J0000000000000000000RUN3",
        accepted_position=40,
        tools=("echo", "http.fetch"),
        tool_positions=(43, 47),
    )
    assert procedure(mine, []) is None
    assert procedure(mine, [peer("01J0000000000000000000RUN0", "deploy staging", 5)]) is None
    found = procedure(
        mine,
        [
            peer("01J0000000000000000000RUN2", "check the weather in Paris", 20),
            peer("01J0000000000000000000RUN1", "check weather in Rome", 10),
        ],
    )
    assert found is not None and found.kind == "procedure"
    # The earliest run of the cluster is the anchor: its words are the trigger, its request
    # is quoted, and the key (tools + trigger) is the same whichever run of it is reflected on.
    assert found.text == "For requests like 'check weather in Rome', use echo then http.fetch"
    assert found.trigger == "check rome weather"
    assert found.dedupe_key == "echo>http.fetch|check rome weather"
    assert found.runs[0] == "01J0000000000000000000RUN1" and len(found.runs) == 3
    assert found.positions[-1] == (43, 47)
    assert found.confidence_bps == 7_000  # 4000 + 1000 per run


def test_a_run_like_a_known_procedure_adds_evidence_to_it() -> None:
    from actors.learning.rules import known_procedure, more_evidence
    from projections.learning import KnownProcedure

    known = [
        KnownProcedure(
            candidate_id="c1",
            dedupe_key="echo|deploy server staging",
            trigger="deploy server staging",
            text="For requests like 'deploy the staging server', use echo",
            runs=2,
            confidence_bps=6000,
        ),
        KnownProcedure(
            candidate_id="c2",
            dedupe_key="echo|check paris weather",
            trigger="check paris weather",
            text="For requests like 'check the weather in Paris', use echo",
            runs=3,
            confidence_bps=7000,
        ),
    ]
    mine = run("check weather in Oslo", tools=("echo",), tool_positions=(50,))
    found = known_procedure(mine, known)
    assert found is not None and found.candidate_id == "c2"
    more = more_evidence(mine, found)
    assert more.candidate_id == candidate_id(ALICE, "procedure", "echo|check paris weather")
    assert (more.runs, more.positions, more.confidence_bps) == ((mine.run_id,), ((50,),), 8000)
    assert known_procedure(run("what time is it", tools=("echo",)), known) is None


@pytest.mark.parametrize(
    "fields",
    [{"state": "failed"}, {"tools": ()}, {"tools_ok": False}, {"tools": ("echo",) * 9}],
)
def test_no_procedure_from_a_failed_run_no_tools_or_a_failed_call(
    fields: dict[str, object],
) -> None:
    mine = run("check the weather in Lyon", tools=("echo",), tool_positions=(9,))
    mine = RunDigest(**{**{f: getattr(mine, f) for f in mine.__struct_fields__}, **fields})
    assert procedure(mine, [peer("01J0000000000000000000RUN2", "check the weather", 1)]) is None


def test_the_models_answer_is_checked_against_the_schema() -> None:
    good = '{"candidates": [{"kind": "fact", "text": "staging is db-2", "confidence_bps": 8500}]}'
    (c,) = parse_model_answer(good)
    assert (c.kind, c.text, c.confidence_bps) == ("fact", "staging is db-2", 8500)
    assert parse_model_answer(f"```json\n{good}\n```")[0] == c
    assert parse_model_answer('{"candidates": []}') == []
    for bad in (
        "Sure! Here is what I learned: staging is db-2",
        '{"candidates": [{"kind": "procedure", "text": "x", "confidence_bps": 1}]}',
        '{"candidates": [{"kind": "fact", "text": "", "confidence_bps": 1}]}',
        '{"candidates": [{"kind": "fact", "text": "x", "confidence_bps": 10001}]}',
        '{"candidates": [{"kind": "fact", "text": "x", "confidence_bps": 1, "why": "y"}]}',
        '{"items": []}',
        '{"candidates": ['
        + ",".join(['{"kind": "fact", "text": "x", "confidence_bps": 1}'] * 9)
        + "]}",
    ):
        with pytest.raises(InvalidReflection):
            parse_model_answer(bad)


def test_a_models_candidate_is_redacted_before_anything_is_derived_from_it() -> None:
    secret = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
    (c,) = parse_model_answer(
        '{"candidates": [{"kind": "fact", "text": "the token is '
        + secret
        + '", "confidence_bps": 9000}]}'
    )
    (proposal,) = model_proposals(run("x"), [c])
    assert secret not in proposal.text and secret not in proposal.dedupe_key
    assert proposal.extractor == "model"
    assert proposal.candidate_id == candidate_id(ALICE, "fact", proposal.dedupe_key)


# --- the candidate: fold and decisions --------------------------------------------------------


def proposal(runs: tuple[str, ...] = ("r1",), confidence: int = 9000) -> Proposal:
    return Proposal(
        kind="fact",
        text="staging is db-2",
        principal=ALICE,
        dedupe_key="staging is db-2",
        confidence_bps=confidence,
        runs=runs,
        positions=tuple((i,) for i, _ in enumerate(runs)),
    )


def fold(*events: Event | None) -> CandidateState | None:
    """The candidate the first event proposes, after the others (on its stream)."""
    stream = stream_of(getattr(events[0], "candidate_id", ""))
    records = [Recorded(e, stream, 0, "reflection") for e in events if e is not None]
    return aggregate_fold(learning_state, records)


def test_a_finding_is_proposed_then_merged_then_nothing_new() -> None:
    first = observe(None, proposal())
    assert isinstance(first, LearningCandidateProposed)
    state = fold(first)
    assert state is not None and state.status == "pending" and state.next_seq == 1
    again = observe(state, proposal(("r1",)))
    assert again is None  # a retried reflection adds nothing
    more = observe(state, proposal(("r1", "r2")))
    assert isinstance(more, LearningEvidenceAdded) and more.runs == ("r2",)
    assert more.positions == ((1,),) and more.confidence_bps == 9_250
    merged = fold(first, more)
    assert merged is not None and merged.runs == ("r1", "r2") and merged.confidence_bps == 9_250


def test_evidence_stops_growing_at_its_cap() -> None:
    from actors.learning.state import MAX_EVIDENCE_RUNS

    runs = tuple(f"r{i}" for i in range(MAX_EVIDENCE_RUNS + 5))
    state = fold(observe(None, proposal(runs[:1])))
    assert state is not None
    more = observe(state, proposal(runs))
    assert isinstance(more, LearningEvidenceAdded) and len(more.runs) == MAX_EVIDENCE_RUNS - 1
    full = fold(observe(None, proposal(runs[:1])), more)
    assert full is not None and observe(full, proposal(("another",))) is None


def test_merged_confidence_is_capped() -> None:
    assert merged_confidence("fact", 9_800, 9_000, 5) == 9_900
    assert merged_confidence("procedure", 6_000, 6_000, 9) == 9_500


def test_due_only_when_pending_and_confident_enough() -> None:
    state = fold(observe(None, proposal(confidence=9000)))
    assert state is not None
    assert due(state, 9000) and not due(state, 9001) and not due(state, 10_001)
    applied = fold(
        observe(None, proposal()), LearningCandidateApplied(candidate_id="c", by="reflection")
    )
    assert applied is not None and not due(applied, 0)


def test_reviews_refused_by_the_status_say_what_to_do() -> None:
    pending = fold(observe(None, proposal()))
    assert pending is not None
    with pytest.raises(CandidateConflict, match="not applied"):
        may_roll_back(pending)
    rejected_event = reject(pending, "user:rita", "not true")
    rejected = fold(observe(None, proposal()), rejected_event)
    assert rejected is not None and rejected.status == "rejected"
    with pytest.raises(CandidateConflict, match="not pending"):
        reject(rejected, "user:rita", "")
    may_accept(rejected)  # a human may change their mind
    applied = fold(
        observe(None, proposal()),
        LearningCandidateApplied(candidate_id="c", by="user:rita", memory_item_id="m1"),
    )
    assert applied is not None
    with pytest.raises(CandidateConflict, match="already applied"):
        may_accept(applied)
    with pytest.raises(CandidateConflict, match="roll it back instead"):
        reject(applied, "user:rita", "")
    may_roll_back(applied)
    rolled_back = LearningCandidateRolledBack(candidate_id="c", by="x")
    rolled = apply(applied, Recorded(rolled_back, applied.stream, 0, "x"))
    assert rolled is not None and rolled.status == "rolled_back" and rolled.memory_item_id == "m1"
    may_accept(rolled)


def test_each_apply_of_a_fact_writes_its_own_memory_item_and_a_retry_the_same() -> None:
    assert memory_item_id("c1", 0) == memory_item_id("c1", 0)
    assert memory_item_id("c1", 0) != memory_item_id("c1", 1)
    assert memory_item_id("c1", 0) != memory_item_id("c2", 0)
