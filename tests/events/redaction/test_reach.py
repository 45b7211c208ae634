"""Every construct streaming holds after a trigger word takes shape within REACH of it.

Streaming redaction (events/redaction/redact_stream.py) never cuts inside a match, but a match
only exists once enough of it has arrived: before that, the text after a trigger word is held
only while the word is among the last REACH characters. A detector whose match can hold
whitespace and can need more than REACH characters from its first character before it matches
at all (``machine`` + a 400-character host + `` password V``; ``--password`` + 400 spaces +
``V``) is cut at a space inside it once the word falls behind, and its value goes out as prose.
So each such expression bounds its gaps, and this test reads every expression's parse tree and
checks the bound: the most characters any text needs, from the first character that is not
optional, before the expression has matched (a quantifier counted at its most, except the last
one, which is done at its fewest; a trailing optional part not at all).
"""

from __future__ import annotations

from re import _constants as sre_constants  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.redaction.detectors import REACH, Detector, Expression
from events.redaction.redact import detectors, scan

UNBOUNDED_VENDOR_RULES = {
    "gitleaks:curl-auth-header": "`curl` then anything on up to six lines; reel's own "
    "authorization and bearer detectors find the header itself",
    "gitleaks:curl-auth-user": "`curl` then anything on up to six lines; reel's own "
    "`-u user:password` detector finds the flag itself, quoted credentials whole as this rule "
    "does (an unquoted one keeps its user in a stream: docs/redaction.md)",
    "gitleaks:yandex-access-token": "a token of unbounded length after its keyword, which "
    "is at most 37 characters before the token: the match is found from the context streaming "
    "keeps (REACH_BACK, test_a_vendor_token_longer_than_reach_after_its_keyword_is_redacted)",
    "gitleaks:private-key": "a key block to the next `KEY-----`; reel's own key block detectors "
    "have the same trigger and hold the block to its END line",
}
"""Vendor rules (gitleaks', loaded as data) whose expressions this bound does not hold for, and
what covers them in a stream (docs/redaction.md, Known gaps)."""

_SPACES = " \t\r\n"
Items = list[tuple[Any, Any]]


class _Tree:
    """Widths over one parsed expression (group references need its state)."""

    def __init__(self, source: str, flags: int) -> None:
        self.parsed = sre_parse.parse(source, flags)

    def alternatives(self) -> list[Items]:
        """The expression's top-level alternatives (itself, when it has none)."""
        items = list(self.parsed)
        if len(items) == 1 and str(items[0][0]) == "BRANCH":
            return [list(branch) for branch in items[0][1][1]]
        return [items]

    def width(self, items: Items) -> tuple[int, float]:
        low, high = sre_parse.SubPattern(self.parsed.state, list(items)).getwidth()
        return low, float("inf") if high >= sre_constants.MAXREPEAT else high

    def formed(self, items: Items) -> float:
        """The most characters a text needs before ``items`` has matched."""
        items = list(items)
        while items and _done_at_end(self, *items[-1]):
            items.pop()  # holds at the end of a text: matched without it
        if not items:
            return 0
        op, arg = items[-1]
        return self.width(items[:-1])[1] + self._formed_one(op, arg)

    def _formed_one(self, op: Any, arg: Any) -> float:
        name = str(op)
        if name == "SUBPATTERN":
            return self.formed(list(arg[-1]))
        if name == "BRANCH":
            branches = [list(branch) for branch in arg[1]]
            # A branch open to the end of the text (a quoted value or an element not closed
            # yet) matches every beginning of its siblings' matches (test_open_branches_hold):
            # none of them needs more than it.
            opened = [self.formed(b) for b in branches if _open_to_the_end(b)]
            cap = min(opened, default=float("inf"))
            return max(min(self.formed(b), cap) for b in branches)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low: int = arg[0]
            sub = list(arg[2])
            return (low - 1) * self.width(sub)[1] + self.formed(sub)
        return self.width([(op, arg)])[1]


def _done_at_end(tree: _Tree, op: Any, arg: Any) -> bool:
    """Whether an item at the end of an expression holds at the end of a text with nothing of
    it: optional, or an assertion that does (not a lookahead that needs a character)."""
    if str(op) == "ASSERT" and arg[0] == 1:
        return tree.width(list(arg[1]))[0] == 0 or _mentions_end(arg[1])
    return tree.width([(op, arg)])[0] == 0


def _mentions_end(items: Any) -> bool:
    for op, arg in items:
        name = str(op)
        if name == "AT" and str(arg) == "AT_END_STRING":
            return True
        if name == "BRANCH" and any(_mentions_end(b) for b in arg[1]):
            return True
        if name in ("SUBPATTERN", "ASSERT") and _mentions_end(arg[-1]):
            return True
    return False


def _open_to_the_end(branch: Items) -> bool:
    r"""A branch that ends by asserting the end of the text (``(?=[\r\n]|\Z)``, ``\Z``)."""
    return bool(branch) and _mentions_end(branch[-1:]) and _min_width(branch) > 0


def _min_width(items: Items) -> int:
    low: int = sre_parse.SubPattern(sre_parse.State(), list(items)).getwidth()[0]
    return low


def _flat(items: Items) -> Items:
    """``items`` with groups that are not repeated opened in place."""
    out: Items = []
    for op, arg in items:
        if str(op) == "SUBPATTERN":
            out.extend(_flat(list(arg[-1])))
        else:
            out.append((op, arg))
    return out


def _holds_space(op: Any, arg: Any) -> bool:
    """Whether one item can match a whitespace character."""
    name = str(op)
    if name == "LITERAL":
        return chr(arg) in _SPACES
    if name in ("NOT_LITERAL", "ANY"):
        return True
    if name == "IN":
        return any(_in_set(arg, c) for c in _SPACES)
    if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
        return any(_holds_space(o, a) for o, a in arg[2])
    if name == "SUBPATTERN":
        return any(_holds_space(o, a) for o, a in arg[-1])
    if name == "BRANCH":
        return any(_holds_space(o, a) for branch in arg[1] for o, a in branch)
    if name == "CATEGORY":
        return str(arg) in ("CATEGORY_SPACE", "CATEGORY_NOT_WORD", "CATEGORY_NOT_DIGIT")
    return False  # assertions, anchors, group references (to a group counted already)


def _in_set(items: Any, char: str) -> bool:
    negate = False
    hit = False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit |= chr(arg) == char
        elif name == "RANGE":
            hit |= arg[0] <= ord(char) <= arg[1]
        elif name == "CATEGORY":
            spaceish = ("CATEGORY_SPACE", "CATEGORY_NOT_WORD", "CATEGORY_NOT_DIGIT")
            hit |= str(arg) in spaceish
    return hit != negate


def held_span(detector: Detector) -> float:
    """The most characters any match of ``detector`` that can hold whitespace needs, from its
    first character that is not optional (the trigger word, or its run), before it matches;
    0 when no match can hold whitespace before its last character."""
    tree = _Tree(detector.expression.source, detector.expression.flags)
    worst = 0.0
    for alternative in tree.alternatives():
        flat = _flat(alternative)
        while flat and _done_at_end(tree, *flat[-1]):
            flat.pop()  # a whitespace only at the end is never cut inside
        if not flat[:-1] or not any(_holds_space(op, arg) for op, arg in flat[:-1]):
            continue
        start = next(i for i, item in enumerate(flat) if tree.width([item])[0] > 0)
        worst = max(worst, tree.formed(flat[start:]))
    return worst


def lead_span(detector: Detector) -> float:
    """The most characters a match can start before its first character that is not optional
    (``DB_`` before ``PASSWORD``, ``wl`` before ``freerdp``): how far streaming looks back from
    a trigger word for the start of its run when it must cut inside a long one."""
    tree = _Tree(detector.expression.source, detector.expression.flags)
    worst = 0.0
    for alternative in tree.alternatives():
        flat = _flat(alternative)
        start = next((i for i, item in enumerate(flat) if tree.width([item])[0] > 0), 0)
        worst = max(worst, tree.width(flat[:start])[1])
    return worst


def _streamed() -> list[Detector]:
    return [d for d in detectors() if d.trigger and not d.multiline]


@pytest.mark.parametrize("detector", _streamed(), ids=lambda d: d.name)
def test_every_match_takes_shape_within_reach_of_its_trigger(detector: Detector) -> None:
    span = held_span(detector)
    if detector.name in UNBOUNDED_VENDOR_RULES:
        assert span > REACH, f"{detector.name} is bounded now: take it off the list"
        return
    assert span <= REACH, f"{detector.name} can need {span} characters before it matches"


@pytest.mark.parametrize("detector", _streamed(), ids=lambda d: d.name)
def test_no_match_starts_more_than_reach_before_its_trigger(detector: Detector) -> None:
    """Past its bound, streaming cuts inside a long run without whitespace at most REACH
    before a trigger word (redact_stream's forced cut): a match starting farther back would
    be cut in two. (``\\w*freerdp`` could; a run holding a trigger word was held whole, past
    the bound, until 2026-11-29.)"""
    assert lead_span(detector) <= REACH


def test_the_measure_sees_an_unbounded_gap() -> None:
    unbounded = Detector("probe", Expression(r"machine[ \t]+\S+\s+password[ \t]+(?P<v>\S+)"), ())
    bounded = Detector(
        "probe", Expression(r"machine[ \t]{1,8}\S{1,64}\s{1,8}password[ \t]{1,8}(?P<v>\S+)"), ()
    )
    token = Detector("probe", Expression(r"\bsk-[A-Za-z0-9]{400}(?:\s|\Z)"), ())
    assert held_span(unbounded) == float("inf")
    assert held_span(bounded) == 7 + 8 + 64 + 8 + 8 + 8 + 1
    assert held_span(token) == 0  # no whitespace inside: never cut inside


_VALUE = st.text(alphabet=st.sampled_from(list("ab9 '\"\\<>/=:-")), min_size=1, max_size=40).filter(
    lambda v: v.strip() and "\n" not in v
)


def _opened() -> set[str]:
    """The detectors whose measure relies on a branch open to the end of the text."""
    names = set()
    for detector in _streamed():
        tree = _Tree(detector.expression.source, detector.expression.flags)
        if _has_open_branch(list(tree.parsed)):
            names.add(detector.name)
    return names


def _has_open_branch(items: Items) -> bool:
    for op, arg in items:
        name = str(op)
        inner: list[Items] = []
        if name == "BRANCH":
            inner = [list(b) for b in arg[1]]
            if len(inner) > 1 and any(_open_to_the_end(b) for b in inner):
                return True
        elif name == "SUBPATTERN":
            inner = [list(arg[-1])]
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            inner = [list(arg[2])]
        if any(_has_open_branch(b) for b in inner):
            return True
    return False


_OPEN_CASES = {
    # detector: texts whose whole matches end in the value: every beginning of each, from
    # its value's first character on, is held (a guard reaches its end)
    "pair": ['password: "{v}"', "password = '{v}'", '{{\\"password\\": \\"{v}\\"}}'],
    "pair_local": ['contraseña: "{v}"', "passwort='{v}'"],
    "xml": ["<password>{v}</password>", '<entry key="db.password">{v}<'],
}


def test_the_open_branches_are_known() -> None:
    assert _opened() == set(_OPEN_CASES)


@settings(max_examples=200, deadline=None)
@given(value=_VALUE)
def test_open_branches_hold(value: str) -> None:
    """What the measure's cap rests on: while a quoted value or an element's text is still
    arriving, a match reaches the end of the text, so streaming holds it whole."""
    for texts in _OPEN_CASES.values():
        for template in texts:
            text = template.format(v=value)
            for start, stop in scan(text)[0]:  # each value replaced in the whole text
                for end in range(start + 1, stop):
                    guards = scan(text[:end])[1]
                    assert any(g.start < start and g.end >= end for g in guards), (text, end)
