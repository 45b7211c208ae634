"""The bare AWS secret access key (40 random-looking base64 characters, no key word) is looked
for only around a run of token characters, as the vendor rules are: it is such a run. These
texts put one everywhere a run can sit (first, last, far past the start, between delimiters, on
its own line, inside a longer text with other runs) and hold the redaction to what a search of
the whole text finds: every match replaced, every look-alike kept."""

from __future__ import annotations

import pytest

from events.redaction.redact import detectors, redact_text

KEY = "Zq8Pw2Lm5Nx7Rv1Tb4Yc6Hd9Jf3Kg0SeWx/QaUo+"
PROSE = "The journal stores each coalesced chunk of model output as one event. " * 4


def _whole_text_matches(text: str) -> list[str]:
    """What the detector's own expression and check accept, searched over the whole text."""
    (detector,) = [d for d in detectors() if d.name == "aws_secret_access_key"]
    assert detector.accept is not None
    found = []
    for match in detector.pattern.finditer(text):
        if detector.accept(match, match.group()):
            found.append(match.group())
    return found


@pytest.mark.parametrize(
    "text",
    [
        KEY,
        f"{KEY} is the key",
        f"{PROSE}{KEY}",
        f"{PROSE}{KEY}.",
        f'aws = "{KEY}"',
        f"a: 1; k: {KEY}; b: 2",
        f"first line\n{KEY}\nlast line",
        f"{'x' * 300} {KEY}",
        f"{PROSE}ghp_notatoken and {KEY}, then {'abc123' * 5} {KEY[::-1]}",
        f"{PROSE}\t{KEY}\t{PROSE}",
    ],
)
def test_every_bare_key_is_replaced(text: str) -> None:
    expected = _whole_text_matches(text)
    assert expected, "the case holds a key the whole-text search finds"
    clean, count = redact_text(text)
    assert count >= len(expected)
    for secret in expected:
        assert secret not in clean


@pytest.mark.parametrize(
    "text",
    [
        f"/{KEY}",  # part of a path: the look-behind keeps it
        f"{KEY}A",  # 41 characters: not a key of 40
        f"{PROSE}{KEY[:39]}",
        "a" * 40,
        PROSE,
    ],
)
def test_look_alikes_are_kept(text: str) -> None:
    assert _whole_text_matches(text) == []
    assert redact_text(text) == (text, 0)
