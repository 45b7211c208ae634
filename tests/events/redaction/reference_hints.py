"""The detectors' literal index as it was before issue 23 (a substring test per literal, in
Python), kept as the reference the differential test holds the product's to
(``test_hints_differential.py``): for every text, the same detectors chosen and the same windows
around token runs, so the same redaction. The body of ``_hint_index`` and ``_detectors_for`` is
the old one, verbatim but for the module's state (built from
:func:`events.redaction.redact.detectors`)."""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

from events.redaction import vendor_rules
from events.redaction.detectors import Detector, trie
from events.redaction.redact import detectors

Span = tuple[int, int]


class _Hints(NamedTuple):
    folded: tuple[str, ...]
    within: dict[str, tuple[str, ...]]
    foreign: tuple[str, ...]
    exact: tuple[str, ...]
    gated: re.Pattern[str]
    inside: dict[str, tuple[str, ...]]
    by_literal: dict[str, list[int]]
    always: list[int]


@cache
def _index() -> tuple[tuple[Detector, ...], _Hints]:
    all_ = detectors()
    by_literal: dict[str, list[int]] = {}
    always: list[int] = []
    folded: set[str] = set()
    gated: set[str] = set()
    for index, detector in enumerate(all_):
        if not detector.hints and not detector.case_hints:
            always.append(index)
        for hint in (*detector.hints, *detector.case_hints):
            by_literal.setdefault(hint, []).append(index)
        (gated if detector.run else folded).update(detector.hints)
    gated -= folded
    exact = {h for d in all_ for h in d.case_hints}
    within = {h: tuple(o for o in folded | gated if o != h and h in o) for h in folded | gated}
    roots = {h for h in folded if not any(o != h and o in h for o in folded)}
    return all_, _Hints(
        folded=tuple(sorted(h for h in roots if h.isascii())),
        within={h: w for h, w in within.items() if w},
        foreign=tuple(sorted(h for h in folded if not h.isascii())),
        exact=tuple(sorted(exact)),
        gated=re.compile("(?=(" + trie(gated) + "))"),
        inside={k: tuple(g for g in gated if g != k and g in k) for k in gated},
        by_literal=by_literal,
        always=always,
    )


_RUN = re.compile(rf"[A-Za-z0-9_.~+/=-]{{{vendor_rules.RUN},}}")
_REACH_BACK = 128
_SPACE = re.compile(r"\s")


def detectors_for(text: str, lowered: str, start: int) -> tuple[list[int], list[Span]]:
    """The old ``events.redaction.redact._detectors_for``."""
    _ALL, _INDEX = _index()
    chosen = {i for i in _INDEX.always if len(text) - start >= _ALL[i].min_length}
    found = [h for h in _INDEX.folded if h in lowered]
    if not lowered.isascii():
        found += [h for h in _INDEX.foreign if h in lowered]
    found += [h for root in found for h in _INDEX.within.get(root, ()) if h in lowered]
    found += [h for h in _INDEX.exact if h in text]
    long_word = any(len(word) >= vendor_rules.RUN for word in text.split())
    runs = [m.span() for m in _RUN.finditer(text)] if long_word else []
    windows: list[Span] = []
    if runs:  # the vendor rules' keywords, near a token run
        near = " ".join(lowered[max(0, s - _REACH_BACK) : e] for s, e in runs)
        found += [
            k for word in set(_INDEX.gated.findall(near)) for k in (word, *_INDEX.inside[word])
        ]
        for s, e in runs:
            space = _SPACE.search(text, e)
            window = (max(0, s - _REACH_BACK), len(text) if space is None else space.end())
            if windows and window[0] <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(windows[-1][1], window[1]))
            else:
                windows.append(window)
    for hint in found:
        chosen.update(_INDEX.by_literal[hint])
    return sorted(chosen), windows
