"""The labelled corpus: recall per secret shape and the false-positive rate on harmless text,
printed (``pytest -s``) and asserted: every listed shape caught, no harmless text changed."""

from __future__ import annotations

from collections import defaultdict

import pytest

from events import MARKER
from events.redaction.redact import redact_text, redact_value
from tests.events.redaction_corpus import HARMLESS, REQUIRED_SHAPES, SECRETS, Secret


def test_the_corpus_covers_every_required_shape() -> None:
    assert {s.shape for s in SECRETS} >= REQUIRED_SHAPES
    assert len(SECRETS) >= 51 + 50 and len(HARMLESS) >= 50 + 30  # issue 21 added 50 and 30
    assert "Students need a basic understanding of algebra before this course." in HARMLESS
    assert "password: ${{ secrets.DB_PASSWORD }}" in HARMLESS  # issue 21's over-redaction


def test_recall_and_false_positive_rate(capsys: pytest.CaptureFixture[str]) -> None:
    caught: dict[str, list[bool]] = defaultdict(list)
    for secret in SECRETS:
        out, count = redact_text(secret.text)
        caught[secret.shape].append(count > 0 and not any(v in out for v in secret.values))
    changed = [text for text in HARMLESS if redact_text(text) != (text, 0)]
    entries = sum(len(v) for v in caught.values())
    hits = sum(sum(v) for v in caught.values())
    with capsys.disabled():
        shapes, harmless = len(caught), len(HARMLESS)
        print(f"\nredaction corpus: {len(SECRETS)} secrets in {shapes} shapes, {harmless} harmless")
        for shape in sorted(caught):
            print(f"  {shape:<24} recall {sum(caught[shape])}/{len(caught[shape])}")
        print(
            f"  recall {hits / entries:.1%} ({hits}/{entries}); "
            f"false positives {len(changed) / len(HARMLESS):.1%} ({len(changed)}/{len(HARMLESS)})"
        )
    missed = [s.text for s in SECRETS if not all(caught[s.shape])]
    assert hits == entries, f"missed: {missed}"
    assert changed == []


@pytest.mark.parametrize("secret", SECRETS, ids=lambda s: s.shape)
def test_each_secret_is_replaced_and_the_text_around_it_kept(secret: Secret) -> None:
    out, count = redact_text(secret.text)
    assert count >= 1 and MARKER in out
    for value in secret.values:
        assert value not in out
    # only the secret goes: text before the first marker is the original text
    assert secret.text.startswith(out[: out.index(MARKER)])
    assert redact_text(out) == (out, 0), "redaction must be idempotent"


@pytest.mark.parametrize("text", HARMLESS)
def test_harmless_text_is_left_exactly_as_it_is(text: str) -> None:
    assert redact_text(text) == (text, 0)


def test_secrets_inside_tool_arguments_and_keys() -> None:
    arguments = {
        "request": {"body": SECRETS[0].text, SECRETS[3].values[0]: "value under a secret key"},
        "headers": [["Authorization", "Basic dXNlcjpwYXNzd29yZC1jYW5hcnk="]],
        "max_tokens": 12,
    }
    clean, count = redact_value(arguments)
    text = repr(clean)
    assert SECRETS[0].values[0] not in text and SECRETS[3].values[0] not in text
    assert "dXNlcjpwYXNzd29yZC1jYW5hcnk" not in text
    assert clean["max_tokens"] == 12
    assert count == 3
