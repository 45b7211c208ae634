"""gitleaks' rules, vendored and loaded as data (events/redaction/vendor_rules.py): the file is the
pinned one, every rule is loaded or excluded for a stated reason, the RE2 translation is right, no
rule can backtrack for ever, and every rule finds an example made from its own expression, through
redaction as a whole and as a stream."""

from __future__ import annotations

import hashlib
import random
import re
import string
import tomllib
from importlib import resources
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest

from events.redaction import vendor_rules
from events.redaction.redact import detectors, redact_text
from events.redaction.redact_stream import redact_chunks
from events.redaction.vendor_rules import EXCLUDED, PIN, RulesError, translate

RULES = vendor_rules.load()
RAW = resources.files("events.redaction").joinpath("rules", vendor_rules.RULES_FILE).read_bytes()
UNBOUNDED = sre_parse.MAXREPEAT


def test_the_vendored_file_is_the_pinned_release_with_its_licence() -> None:
    assert hashlib.sha256(RAW).hexdigest() == PIN.sha256
    licence = resources.files("events.redaction").joinpath("rules", "LICENSE.gitleaks").read_text()
    assert licence.startswith("MIT License") and "Zachary Rice" in licence
    assert re.fullmatch(r"v\d+\.\d+\.\d+", PIN.release) and re.fullmatch(
        r"[0-9a-f]{40}", PIN.commit
    )


def test_a_changed_rules_file_is_refused() -> None:
    with pytest.raises(RulesError, match="gitleaks"):
        vendor_rules.load_file(RAW + b"\n# edited\n")


def test_every_rule_is_loaded_or_excluded_for_a_reason() -> None:
    ids = [rule["id"] for rule in tomllib.loads(RAW.decode())["rules"]]
    loaded = [rule.id for rule in RULES]
    assert sorted(loaded + list(EXCLUDED)) == sorted(ids)
    assert all(len(reason) > 20 for reason in EXCLUDED.values())
    assert len(loaded) >= 200
    assert [d.name for d in detectors()[-len(RULES) :]] == [f"gitleaks:{rule.id}" for rule in RULES]


@pytest.mark.parametrize(
    ("go", "python"),
    [
        (r"\b(p8e-(?i)[a-z0-9]{32})(?:x|$)", r"\b(p8e-(?i:[a-z0-9]{32}))(?:x|$)"),
        (r"dp\.pt\.(?i)[a-z0-9]{43}", r"dp\.pt\.(?i:[a-z0-9]{43})"),
        (r"(?:[^\w-]|\z)", r"(?:[^\w-]|\Z)"),
        (r"\b(pat[[:alnum:]]{14})", r"\b(pat[a-zA-Z0-9]{14})"),
        (r"(?-i:[Aa]pi|API)", r"(?-i:[Aa]pi|API)"),
        (r"(?<name>x)", r"(?P<name>x)"),
        (r"[^]]+", r"[^\]]+"),
    ],
)
def test_re2_is_translated(go: str, python: str) -> None:
    assert translate(go) == python
    re.compile(python)


def _unbounded_inside_unbounded(items: Any, inside: bool = False) -> bool:
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            unbounded = arg[1] == UNBOUNDED
            if unbounded and inside:
                return True
            if _unbounded_inside_unbounded(arg[2], inside or unbounded):
                return True
        elif name == "SUBPATTERN":
            if _unbounded_inside_unbounded(arg[-1], inside):
                return True
        elif name == "BRANCH" and any(_unbounded_inside_unbounded(b, inside) for b in arg[1]):
            return True
    return False


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_no_rule_nests_unbounded_repetition(rule: vendor_rules.Rule) -> None:
    """Python's engine backtracks where RE2 does not: a repetition without bound inside
    another one (``(a+)*``) can take exponential time on a crafted text."""
    tree = sre_parse.parse(rule.detector.pattern.pattern, rule.detector.pattern.flags)
    assert not _unbounded_inside_unbounded(list(tree))


# --- an example of each rule, made from its own expression -----------------------------------

_PRINTABLE = string.ascii_letters + string.digits + "_-."
_CATEGORY = {
    "DIGIT": string.digits,
    "WORD": string.ascii_letters + string.digits + "_",
    "SPACE": " ",
}


def _class(items: Any) -> str:
    chars: set[str] = set()
    negate = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.add(chr(arg))
        elif name == "RANGE":
            chars.update(chr(c) for c in range(arg[0], arg[1] + 1))
        elif name == "CATEGORY":
            kind = str(arg).removeprefix("CATEGORY_")
            chars.update(_CATEGORY.get(kind, ""))
    if negate:
        return "".join(c for c in _PRINTABLE if c not in chars)
    return "".join(sorted(chars))


def _make(items: Any, rnd: random.Random) -> str:
    out: list[str] = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append(rnd.choice([c for c in _PRINTABLE if c != chr(arg)]))
        elif name == "ANY":
            out.append(rnd.choice(_PRINTABLE))
        elif name == "IN":
            out.append(rnd.choice(_class(arg)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, sub = arg
            high = low + 24 if high == UNBOUNDED else high
            count = low if name == "MIN_REPEAT" else rnd.randint(low, min(high, low + 12))
            out.extend(_make(sub, rnd) for _ in range(count))
        elif name == "SUBPATTERN":
            out.append(_make(arg[-1], rnd))
        elif name == "BRANCH":
            out.append(_make(rnd.choice(arg[1]), rnd))
    return "".join(out)


def example(rule: vendor_rules.Rule) -> tuple[str, str]:
    """Text that the rule matches, and the secret in it (the part redaction must remove)."""
    pattern = rule.detector.pattern
    tree = list(sre_parse.parse(pattern.pattern, pattern.flags))
    for seed in range(400):
        text = _make(tree, random.Random(seed)).strip()
        if rule.detector.hints and not any(k in text.lower() for k in rule.detector.hints):
            text = f"{rule.detector.hints[0]} {text}"  # the keyword gitleaks wants nearby
        match = pattern.search(text)
        if match is None:
            continue
        groups = [g for g in rule.detector.groups if match.group(g)] or [0]
        secret = match.group(groups[0])
        accept = rule.detector.accept
        if len(secret) >= 8 and accept is not None and accept(match, secret):
            return text, secret
    raise AssertionError(f"no example of {rule.id} in 400 tries")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_every_rule_finds_its_own_example_whole_and_streamed(rule: vendor_rules.Rule) -> None:
    text, secret = example(rule)
    out, count = redact_text(text)
    assert count >= 1 and secret not in out, (text, out)
    # after prose, as one line of a tool's output
    framed = "Here is the config we found on the build host:\n" + text + "\nend of file"
    assert secret not in redact_text(framed)[0]
    # streamed one character at a time: exactly the whole text's redaction
    assert redact_chunks(list(framed)) == redact_text(framed)
