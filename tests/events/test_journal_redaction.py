"""Redaction canaries: secrets handed to the journal never reach its bytes, the ``redacted``
counts are exact, and schema fields or prose about "tokens" are left alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from events import MARKER, Journal, JournalReader, NodeKey, redact_value
from events.catalog import (
    ApprovalRequested,
    Event,
    RunAccepted,
    RunCompleted,
    RunFailed,
    RunTurnCompleted,
    SessionCreated,
    ToolCompleted,
    ToolProposed,
)

OPENAI = "sk-Tq3vR9xLm2Np8Kd4Wz7Yb1Hc6Fg0Js5A"
OPENAI_PROJECT = "sk-proj-AbC_dEf-GhIjKlMnOpQrStUvWxYz0123456789_xY"
ANTHROPIC = (
    "sk-ant-api03-Xy9_kL2mNpQ4-rS7tU1vW3xY5zA6bC8dE0fG2hJ4kL6mN8pQ0rS2tU4vW6xY8zA_"
    "BcDeFgHiJkLmNoPqRsTu-VwXyZ012345678AA"
)
GITHUB_CLASSIC = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"
GITHUB_FINE = "github_pat_11ABCDEFG0Q1w2E3r4T5y6_U7i8O9p0AsDfGhJkLzXcVbNmQwErTyUiOpAsDfGhJkL"
AWS = "AKIAIOSFODNN7EXAMPLE"
BEARER = "eyJ0b2tlbiI6ImNhbmFyeSJ9.c2lnbmF0dXJlLWNhbmFyeQ"
PEM_BODY = "MC4CAQAwBQYDK2VwBCIEIPrivateKeyCanaryBytes0123456789abcdefXYZ"
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
PASSWORD = "hunter2-Canary!"
JSON_API_KEY = "json-api-key-canary-77"
AUTH_HEADER = "Basic dXNlcjpwYXNzd29yZC1jYW5hcnk="
COOKIE = "session=cookie-canary-4242; theme=dark"
CLIENT_SECRET = "client-secret-canary-99"
NESTED_TOKEN = "nested-token-canary"

CANARIES = [
    OPENAI,
    OPENAI_PROJECT,
    ANTHROPIC,
    GITHUB_CLASSIC,
    GITHUB_FINE,
    AWS,
    BEARER,
    PEM_BODY,
    PASSWORD,
    JSON_API_KEY,
    "dXNlcjpwYXNzd29yZC1jYW5hcnk",
    "cookie-canary-4242",
    CLIENT_SECRET,
    NESTED_TOKEN,
]

PROSE = (
    f"here is my key {OPENAI} and the project one {OPENAI_PROJECT}; "
    f"claude: {ANTHROPIC}\n"
    f"push with {GITHUB_CLASSIC} or {GITHUB_FINE}, aws {AWS}.\n"
    f"curl -H 'Authorization: Bearer {BEARER}' https://example.test\n"
    f"{PEM}\n"
    f"db: password={PASSWORD} host=db.internal\n"
    f'config: {{"api_key": "{JSON_API_KEY}", "region": "eu"}}'
)
PROSE_SECRETS = 10  # two sk-, one sk-ant-, two GitHub, AWS, Bearer, PEM, password=, "api_key"

ARGUMENTS: dict[str, Any] = {
    "url": "https://api.example.test/v1",
    "headers": {"Authorization": AUTH_HEADER, "cookie": COOKIE, "Accept": "text/plain"},
    "auth": {"client_id": "public-client", "client_secret": CLIENT_SECRET},
    "steps": [{"note": f"then use {GITHUB_CLASSIC}"}, {"config": {"token": NESTED_TOKEN}}],
    "max_tokens": 5,
}
ARGUMENT_SECRETS = 5  # Authorization, cookie, client_secret, token (by key) + ghp_ in a string

HARMLESS = "the model emitted 12 tokens; max_tokens=5, prompt_tokens: 7, tokenizer=cl100k"


def secret_events() -> list[tuple[str, Event, int]]:
    """(stream, event, expected redacted count) for every event kind with free-form fields."""
    return [
        ("session/s", SessionCreated(session_id="s", label=f"mine {GITHUB_CLASSIC}"), 1),
        ("session/s", RunAccepted(run_id="r", session_id="s", text=PROSE), PROSE_SECRETS),
        (
            "tool/t",
            ToolProposed(
                invocation_id="t",
                run_id="r",
                session_id="s",
                call_id="c",
                tool="http.fetch",
                arguments=ARGUMENTS,
            ),
            ARGUMENT_SECRETS,
        ),
        (
            "tool/t",
            ApprovalRequested(
                approval_id="a",
                invocation_id="t",
                run_id="r",
                session_id="s",
                tool="http.fetch",
                arguments=[PROSE, ARGUMENTS],
                risk="high",
                reason="network",
            ),
            PROSE_SECRETS + ARGUMENT_SECRETS,
        ),
        (
            "tool/t",
            ToolCompleted(
                invocation_id="t",
                run_id="r",
                tool="http.fetch",
                ok=False,
                output=f"echo {AWS}",
                error=f"401 for {OPENAI}",
            ),
            2,
        ),
        ("run/r", RunFailed(run_id="r", reason="provider_error", message=PROSE), PROSE_SECRETS),
        ("run/r", RunCompleted(run_id="r", answer=f"done: {PEM}"), 1),
    ]


@pytest.fixture
def written(data_dir: Path) -> Path:
    """A closed journal holding every secret event, plus harmless ones."""
    path = data_dir / "journal.db"
    with Journal(path, node_key=NodeKey.load_or_create(data_dir / "node.key")) as journal:
        for stream, event, _ in secret_events():
            journal.append(stream, [event], expected_seq=None)
        journal.append(
            "run/h",
            [
                RunTurnCompleted(
                    run_id="h",
                    turn=0,
                    prompt_tokens=1234,
                    completion_tokens=56,
                    tool_calls=0,
                    finish_reason="stop",
                ),
                RunCompleted(run_id="h", answer=HARMLESS, prompt_tokens=1234, completion_tokens=56),
            ],
            expected_seq=0,
        )
    return path


def test_no_secret_reaches_the_journal_bytes(written: Path) -> None:
    files = [p for p in written.parent.iterdir() if p.name.startswith("journal.db")]
    assert written in files
    for path in files:  # journal.db, and -wal / -shm if any were left behind
        raw = path.read_bytes()
        for canary in CANARIES:
            assert canary.encode() not in raw, f"{canary!r} leaked into {path.name}"
    assert MARKER.encode() in written.read_bytes()


def test_redacted_counts_are_exact(written: Path) -> None:
    reader = JournalReader.open(written)
    try:
        stored = [e for e in reader.read(limit=100) if e.kind != "journal.checkpoint"]
    finally:
        reader.close()
    expected = [count for _, _, count in secret_events()] + [0, 0]
    assert [e.decode().redacted for e in stored] == expected
    for event in (e.decode() for e in stored):
        text = repr(event)
        for canary in CANARIES:
            assert canary not in text


def test_schema_fields_and_prose_about_tokens_are_not_redacted(written: Path) -> None:
    reader = JournalReader.open(written)
    try:
        turn, done = (e.decode() for e in reader.read_stream("run/h"))
    finally:
        reader.close()
    assert turn == RunTurnCompleted(
        run_id="h",
        turn=0,
        prompt_tokens=1234,
        completion_tokens=56,
        tool_calls=0,
        finish_reason="stop",
    )
    assert done == RunCompleted(
        run_id="h", answer=HARMLESS, prompt_tokens=1234, completion_tokens=56
    )


def test_redacted_arguments_keep_their_shape() -> None:
    cleaned, count = redact_value(ARGUMENTS)
    assert count == ARGUMENT_SECRETS
    assert cleaned == {
        "url": "https://api.example.test/v1",
        "headers": {"Authorization": MARKER, "cookie": MARKER, "Accept": "text/plain"},
        "auth": {"client_id": "public-client", "client_secret": MARKER},
        "steps": [{"note": f"then use {MARKER}"}, {"config": {"token": MARKER}}],
        "max_tokens": 5,
    }


@pytest.mark.parametrize(
    ("text", "expected", "count"),
    [
        (f"api_key={OPENAI}", f"api_key={MARKER}", 1),  # one secret counts once
        (f'"password": "{PASSWORD}"', f'"password": "{MARKER}"', 1),
        (f"Authorization: Bearer {BEARER}", f"Authorization: {MARKER}", 1),
        (f"{ANTHROPIC}.", f"{MARKER}.", 1),
        ("max_tokens=5 and 12 tokens", "max_tokens=5 and 12 tokens", 0),
        ("ask-me-anything-about-this-topic", "ask-me-anything-about-this-topic", 0),
    ],
)
def test_redaction_of_single_strings(text: str, expected: str, count: int) -> None:
    assert redact_value(text) == (expected, count)


def test_already_redacted_values_are_not_counted_again() -> None:
    once, first = redact_value({"password": PASSWORD, "text": f"token={NESTED_TOKEN}"})
    twice, second = redact_value(once)
    assert (first, second) == (2, 0)
    assert twice == once
