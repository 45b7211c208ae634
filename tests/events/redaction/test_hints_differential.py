"""Issue 23: redaction looks for its literals in one pass in C and compiles each detector's
expression when a text first holds one of its literals, the vendor rules read from a table
derived from the pinned file. None of it changes what is redacted:

- against the old literal index (``reference_hints.py``, a substring test per literal), on
  random text built from every detector's literals and triggers in any case, sample secrets of
  every family (the corpus and an example of every vendor rule), escapes, token runs, Unicode
  whose lower case changes length, and empty text: the same detectors and windows at every call
  the engine makes, whole, as JSON values and streamed in random chunks, and the same output;
- the table the loader reads is exactly what the pinned file derives, and a table derived from
  another file is refused;
- a process that builds the detectors compiles none of their expressions, and redacting prose
  compiles only the few it needs."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib import resources

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from events.redaction import redact, vendor_rules
from events.redaction.redact import detectors, redact_text, redact_value
from events.redaction.redact_stream import redact_chunks
from tests.events.redaction import reference_hints
from tests.events.redaction.test_vendor_rules import RAW, RULES
from tests.events.redaction.test_vendor_rules import example as rule_example
from tests.events.redaction_corpus import HARMLESS, SECRETS

LITERALS = sorted({w for d in detectors() for w in (*d.hints, *d.case_hints, *d.trigger)})
SAMPLES = [s.text for s in SECRETS] + HARMLESS + [rule_example(rule)[0] for rule in RULES]
SPECIALS = [
    *" \n\t\r=:'\"-_./@`,;{}[]<>|",
    "://",
    ": ",
    " = ",
    '="',
    "\\n",
    "\\u0022",
    '\\"',
    "\\x41",
    "\u212a",  # KELVIN SIGN: lower-cases to "k"
    "\u0130",  # I WITH DOT ABOVE: lower-cases to two characters
    "\u017f",  # LONG S
    "\u3000",
    "\uff1a",
    "-----BEGIN ",
    "PRIVATE KEY-----",
]
TOKEN = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~+/=-"


def _cased(word: str) -> st.SearchStrategy[str]:
    return st.sampled_from([word, word.upper(), word.title(), word.swapcase()])


PIECES = st.one_of(
    st.sampled_from(LITERALS).flatmap(_cased),
    st.sampled_from(SAMPLES),
    st.sampled_from(SPECIALS),
    st.text(max_size=12),
    st.text(alphabet=TOKEN, min_size=1, max_size=48),
)
TEXTS = st.lists(PIECES, max_size=14).map("".join)


@st.composite
def chunked(draw: st.DrawFn) -> tuple[str, list[str]]:
    text = draw(TEXTS)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=30)))
    bounds = [0, *cuts, len(text)] if text else [0, 0]
    return text, [text[a:b] for a, b in itertools.pairwise(bounds)]


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(TEXTS, st.data())
@example("", None)
@example("AKIAIOSFODNN7EXAMPLE ghf_" + "a" * 40, None)
def test_the_same_detectors_and_windows_as_the_old_index(text: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(text))) if data is not None else 0
    lowered = text.lower()
    assert redact._detectors_for(text, lowered, start) == reference_hints.detectors_for(
        text, lowered, start
    )


def _outputs(text: str, chunks: list[str]) -> tuple[object, ...]:
    document = {"note": text, "args": ["run", text], "nested": json.dumps({"out": text})}
    return redact_text(text), redact_value(document), redact_chunks(chunks)


@pytest.fixture
def both_indexes() -> Iterator[Callable[[str, list[str]], tuple[object, ...]]]:
    """Redact with the product's index checked against the reference at every call the engine
    makes (escape views, stream buffers from any start, command lines, JSON values); then with
    the reference alone. Returns both runs' outputs."""
    new = redact._detectors_for

    def checked(text: str, lowered: str, start: int) -> tuple[list[int], list[tuple[int, int]]]:
        got = new(text, lowered, start)
        assert got == reference_hints.detectors_for(text, lowered, start), (text, start)
        return got

    def run(text: str, chunks: list[str]) -> tuple[object, ...]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(redact, "_detectors_for", checked)
            ours = _outputs(text, chunks)
            patch.setattr(redact, "_detectors_for", reference_hints.detectors_for)
            theirs = _outputs(text, chunks)
        return ours, theirs

    yield run


@SETTINGS
@given(chunked())
@example(("", [""]))
def test_the_same_redaction_whole_as_values_and_streamed(
    both_indexes: Callable[[str, list[str]], tuple[object, ...]], case: tuple[str, list[str]]
) -> None:
    ours, theirs = both_indexes(*case)
    assert ours == theirs


@pytest.mark.parametrize("text", [s.text for s in SECRETS] + HARMLESS)
def test_the_corpus_redacts_as_with_the_old_index(
    both_indexes: Callable[[str, list[str]], tuple[object, ...]], text: str
) -> None:
    ours, theirs = both_indexes(text, list(text))
    assert ours == theirs


def test_the_derived_table_is_what_the_pinned_file_derives() -> None:
    table = vendor_rules.derive(RAW)
    stored = resources.files("events.redaction").joinpath("rules", vendor_rules.DERIVED_FILE)
    assert stored.read_bytes() == vendor_rules.derived_bytes(table), (
        "regenerate it: .venv/bin/python -m events.redaction.vendor_rules"
    )
    assert vendor_rules.load() == vendor_rules.load_file(RAW)
    assert [d.name for d in detectors()[-len(RULES) :]] == [f"gitleaks:{r.id}" for r in RULES]


def test_a_table_derived_from_another_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    other = vendor_rules.PIN._replace(sha256="0" * 64)
    monkeypatch.setattr(vendor_rules, "PIN", other)
    with pytest.raises(vendor_rules.RulesError, match="derived"):
        vendor_rules.load()


_COUNT_COMPILES = """
import sys
from events.redaction import redact
from events.redaction.detectors import _compiled
redact.detectors()
built = _compiled.cache_info().currsize
redact.redact_text(sys.argv[1])
print(built, _compiled.cache_info().currsize)
"""


@pytest.mark.parametrize(
    ("text", "most"),
    [
        ("The deployment finished and every health check answered within a second.", 1),
        ("db password: Hunter2-canary and Bearer eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl", 20),
    ],
)
def test_building_the_detectors_compiles_no_expression(text: str, most: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", _COUNT_COMPILES, text], capture_output=True, text=True, check=True
    )
    built, after = map(int, out.stdout.split())
    assert built == 0
    assert 0 < after <= most < len(detectors()) / 10  # of about 250
