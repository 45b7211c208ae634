"""Redaction of secrets, applied to every event before it is hashed and stored.

A secret handed to reel must never reach the journal's bytes, and the journal is append-only:
what is stored cannot be taken back. So redaction runs on the event before it is encoded, and
it covers every string the event carries (:mod:`events.fields`): free text is redacted,
identifiers are checked against strict patterns and refused when they do not fit or look like
a secret (:class:`events.fields.InvalidField`).

Free text is redacted as values, never as an encoding of them (issue 21: a tool result's
``host=db\npassword=x`` read as text has a key ``npassword``):

* a string that is a JSON document (a tool's result, a model's arguments, an HTTP body) is
  decoded, its values redacted by these rules, and encoded again;
* a mapping key that names a secret (``password``, ``api_key``, ``authorization``, ``cookie``,
  ``credential``, ``private_key``, ``access_token`` ...) has its whole value replaced, and keys
  themselves are redacted like any text; a list of strings is also read as a command line;
* inside strings, the shapes of :mod:`events.redaction.detectors` and
:mod:`events.redaction.vendor_rules` are
  replaced in place by ``[REDACTED]`` (the key of a ``key=value`` pair is kept, the value
  replaced), in the text as written and as read through its escapes
  (:mod:`events.redaction.escapes`).

Each replacement counts once (overlapping matches are one); the event records the total in
``redacted``. Redaction is idempotent: a marker is never redacted again, so an event redacted
by its actor passes the journal's own pass unchanged. :func:`find_spans` is the engine both
:func:`redact_text` and streaming (:class:`events.redaction.redact_stream.StreamRedactor`) use, so a
stream redacted piece by piece comes out as the whole text redacted at once.
"""

from __future__ import annotations

import re
import threading
from typing import Any, NamedTuple, TypeVar

import ahocorasick
import msgspec

from events.catalog import Event, kind_of
from events.fields import Check, Identifier, InvalidField, OneOf, Text, plan_of
from events.redaction import vendor_rules
from events.redaction.detectors import (
    LOCAL_PASSWORD_WORDS,
    MARKER,
    Detector,
    Expression,
    build,
    is_placeholder,
    secret_pair,
)
from events.redaction.escapes import unescaped
from events.redaction.terms import is_handle

__all__ = [
    "MARKER",
    "Guard",
    "apply_spans",
    "detectors",
    "find_spans",
    "is_secret_key",
    "looks_secret",
    "redact_event",
    "redact_text",
    "redact_value",
    "scan",
]

_SECRET_KEY_PARTS = (
    "secret",
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "private_key",
    "access_token",
    "refresh_token",
    "auth_token",
    "session_token",
    "id_token",
    "bearer",
    "access_key",
    "client_key_data",
)
_SECRET_KEYS_EXACT = frozenset({"token", "pin", "otp", "pwd", "pass"})
# A part counts only as whole words of the key (``x_api_key``, ``credentials``), so counts such
# as ``valid_tokens`` or ``paid_tokens`` are not taken for an ``id_token``; a name glued in front
# of a password or a secret counts (``dbpassword``, ``clientsecret``).
_SECRET_KEY_RE = re.compile(
    r"(?:^|_)(?:" + "|".join(_SECRET_KEY_PARTS) + r")s?(?:$|_)"
    r"|(?:password|passwd|passphrase|secret|apikey)s?$|_pass$"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_LOCAL_KEY = re.compile("|".join(re.escape(w) for w in LOCAL_PASSWORD_WORDS), re.IGNORECASE)
_JWK_PRIVATE = ("d", "p", "q", "dp", "dq", "qi", "k", "oth")
"""The private members of a JSON Web Key (RFC 7518): a dict with ``kty`` has them replaced."""
MAX_DEPTH = 64
"""Nesting past which a value is replaced whole (a document built to exhaust the stack)."""

T = TypeVar("T", bound=Event)
Span = tuple[int, int]


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (case, camelCase, ``-``, ``.`` and spaces
    ignored; the word for password in other languages counts)."""
    norm = _CAMEL.sub("_", key.strip()).lower()
    norm = norm.replace("-", "_").replace(" ", "_").replace(".", "_")
    if norm in _SECRET_KEYS_EXACT:
        return True
    return _SECRET_KEY_RE.search(norm) is not None or _LOCAL_KEY.search(key) is not None


_ALL: tuple[Detector, ...]
""":func:`detectors`, once built (set with :data:`_INDEX` by :func:`_compile`)."""
_INDEX: _Hints
_COMPILED = False
_COMPILING = threading.Lock()


def detectors() -> tuple[Detector, ...]:
    """Every detector: reel's own (:func:`events.redaction.detectors.build`), then the vendor rules
    (:mod:`events.redaction.vendor_rules`). A guard's ``detector`` is an index into this tuple.

    Built on first use, not at import, and then only their literals and what the index needs
    (a few milliseconds): each detector's expression is compiled when a text first holds one of
    its literals (:class:`events.redaction.detectors.Expression`; about 250 expressions, a
    third of a second all at once). A process pays only for the shapes its texts come near."""
    if not _COMPILED:
        _compile()
    return _ALL


def _compile() -> None:
    global _ALL, _INDEX, _COMPILED
    with _COMPILING:
        if _COMPILED:
            return
        _ALL = build() + tuple(r.detector for r in vendor_rules.load())
        _INDEX = _hint_index()
        _COMPILED = True


class _Hints(NamedTuple):
    """Which detectors each literal enables, and how each literal is looked for: every set of
    literals is an Aho-Corasick automaton, searched in one pass in C (a substring test per
    literal, in Python, cost more than the rest of a chunk's redaction)."""

    literals: ahocorasick.Automaton
    """Looked for in the lower-cased text, each giving its :class:`_Found`: the literals of
    detectors without a token run (:attr:`Detector.run`), the vendor keywords that contain one
    of those (text that holds them holds that one too), and the AWS key id prefixes,
    lower-cased (confirmed as they are)."""
    gated: ahocorasick.Automaton
    """The vendor keywords of rules that need a token run, each giving the detectors it
    enables: looked for near such a run (and, those of them in :attr:`literals`, anywhere)."""
    by_literal: dict[str, tuple[int, ...]]
    always: list[int]


class _Found(NamedTuple):
    """What finding one lower-cased literal means."""

    enables: tuple[int, ...]
    """Detectors it enables as it is."""
    exact: tuple[str, ...]
    """Literals (case hints) it may be, lower-cased: each enables its own detectors when the
    text holds it as it is."""


def _hint_index() -> _Hints:
    """Every literal once, and which detectors each one enables: a text is searched for all of
    them in one pass; most text has none, and then only the detectors without literals run."""
    by_literal: dict[str, tuple[int, ...]] = {}
    always: list[int] = []
    folded: set[str] = set()
    gated: set[str] = set()
    for index, detector in enumerate(_ALL):
        if not detector.hints and not detector.case_hints:
            always.append(index)
        for hint in (*detector.hints, *detector.case_hints):
            by_literal[hint] = (*by_literal.get(hint, ()), index)
        (gated if detector.run else folded).update(detector.hints)
    gated -= folded
    exact: dict[str, tuple[str, ...]] = {}
    for hint in sorted({h for d in _ALL for h in d.case_hints}):
        exact[hint.lower()] = (*exact.get(hint.lower(), ()), hint)
    literals = _automaton({w: _Found(by_literal[w], exact.get(w, ())) for w in folded})
    holding = {g for g in gated if next(literals.iter(g), None) is not None}
    for word in (holding | exact.keys()) - folded:
        enables = by_literal[word] if word in holding else ()
        literals.add_word(word, _Found(enables, exact.get(word, ())))
    literals.make_automaton()
    return _Hints(
        literals=literals,
        gated=_automaton({w: by_literal[w] for w in gated}),
        by_literal=by_literal,
        always=always,
    )


def _automaton(values: dict[str, object]) -> ahocorasick.Automaton:
    found = ahocorasick.Automaton()
    for word, value in values.items():
        found.add_word(word, value)
    found.make_automaton()
    return found


_TOKEN = "A-Za-z0-9_.~+/=-"
_RUN = Expression(rf"(?<![{_TOKEN}])[{_TOKEN}]{{{vendor_rules.RUN},}}")
"""A token run (tried only where one starts: each run is read once)."""
_FIRST_RUN = Expression(
    rf"(?:[^{_TOKEN}]*+[{_TOKEN}]{{1,{vendor_rules.RUN - 1}}}+(?![{_TOKEN}]))*+"
    rf"[^{_TOKEN}]*+[{_TOKEN}]{{{vendor_rules.RUN}}}"
)
"""From a text's start, past the shorter runs without backtracking, to the first
:data:`~events.redaction.vendor_rules.RUN` characters of its first token run: most text has
none, and this tells in one pass (half what :data:`_RUN` takes to find none)."""
REACH_BACK = 128
"""How far before a token run a vendor rule's match can start (``adafruit_io_key = ``): its
keyword is looked for there, and its expression tried from there to the next whitespace after
the run (the rule's own expression decides; the window only bounds where it is tried)."""
_SHORTEST = 5
"""No detector matches fewer characters (``pwd=x``)."""


def _detectors_for(text: str, lowered: str, start: int) -> tuple[list[int], list[Span]]:
    """Indices of the detectors that can match in ``text`` (literals are looked for in the
    whole text: context included), in priority order; and the windows around token runs, the
    only places a vendor rule is looked for."""
    # Loops, not set comprehensions: a comprehension is a call (a frame) in Python 3.11, and
    # most text finds no literal at all.
    chosen: set[int] = set()
    size = len(text) - start
    for i in _INDEX.always:
        if size >= _ALL[i].min_length:
            chosen.add(i)
    seen: set[_Found] = set()
    for _, found in _INDEX.literals.iter(lowered):
        if found in seen:
            continue
        seen.add(found)
        chosen.update(found.enables)
        for hint in found.exact:
            if hint in text:
                chosen.update(_INDEX.by_literal[hint])
    first = _FIRST_RUN.compiled().match(text)
    runs = []
    if first is not None:
        runs = [m.span() for m in _RUN.compiled().finditer(text, first.end() - vendor_rules.RUN)]
    windows: list[Span] = []
    if runs:  # the vendor rules' keywords, near a token run
        near = " ".join(lowered[max(0, s - REACH_BACK) : e] for s, e in runs)
        for enables in {enables for _, enables in _INDEX.gated.iter(near)}:
            chosen.update(enables)
        for s, e in runs:
            space = _SPACE.search(text, e)
            window = (max(0, s - REACH_BACK), len(text) if space is None else space.end())
            if windows and window[0] <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(windows[-1][1], window[1]))
            else:
                windows.append(window)
    return sorted(chosen), windows


_SPACE = re.compile(r"\s")
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def _anchored_starts(index: int, text: str, lowered: str, start: int) -> list[int]:
    """Where an anchored detector can match: every segment start (the run's start, and after
    each ``_``, ``.``, ``-``) of the key-character run around each anchor, from ``start`` on.
    A match always starts at one of these (its key holds the anchor word), so trying only
    these finds the same leftmost matches as a search from every position."""
    detector = _ALL[index]
    assert detector.anchor is not None
    if len(lowered) == len(text):
        anchors = detector.anchor.compiled().finditer(lowered, start)
    else:  # lower-casing changed the length (rare Unicode): search the text itself
        anchors = detector.anchor._replace(flags=re.IGNORECASE).compiled().finditer(text, start)
    starts: set[int] = set()
    done_until = -1
    for anchor in anchors:
        if anchor.start() < done_until:
            continue
        lo = anchor.start()
        while lo > 0 and text[lo - 1] in _KEY_CHARS:
            lo -= 1
        hi = anchor.end()
        while hi < len(text) and text[hi] in _KEY_CHARS:
            hi += 1
        done_until = hi
        starts.add(lo)
        starts.update(i + 1 for i in range(lo, hi) if text[i] in "_.-")
    return sorted(p for p in starts if p >= start)


def _span(match: re.Match[str], detector: Detector) -> Span:
    for group in detector.groups:
        s, e = match.span(group)
        if e > s:
            return s, e
    return match.span()


class Guard(NamedTuple):
    """Where a match lies (from its first character, key included, to its end), so streaming
    never cuts inside one; ``detector`` is its index in :func:`detectors`."""

    start: int
    end: int
    detector: int


def scan(text: str, start: int = 0) -> tuple[list[Span], list[Guard]]:
    """The spans to replace in ``text``, sorted and merged, among matches that begin at or after
    ``start`` (the text before ``start`` is context: look-behinds see it, nothing in it is
    reported); and the guards: every accepted match, and every rejected one that reaches the end
    of ``text`` (more text could change the verdict). A match a check rejects does not hide a
    match that starts inside it, so the result at a position depends only on the text near it.

    Text with escape sequences is also read as a reader sees it (:mod:`events.redaction.escapes`):
    what is found there is mapped back and replaced with the escapes that spell it, so
    ``host=db\\npassword=x`` and ``\\u0022password\\u0022: \\u0022x\\u0022`` lose their values.
    """
    found, guards = _scan(text, start)
    view = unescaped(text)
    if view is None:
        return found, guards
    more, seen = _scan(view.text, view.find(start))
    if not more and not seen:
        return found, guards
    size, shown = len(text), len(view.text)
    found += [(view.start(s), view.end(e)) for s, e in more]
    guards += [
        Guard(view.start(g.start), size if g.end >= shown else view.end(g.end), g.detector)
        for g in seen
        if g.start < shown
    ]
    return _merged(found), guards


def _scan(text: str, start: int) -> tuple[list[Span], list[Guard]]:
    size = len(text)
    found: list[Span] = []
    guards: list[Guard] = []
    if size - start < _SHORTEST or (size < vendor_rules.RUN and text.isalnum()):
        return found, guards  # a short word (a mapping's key): no shape fits in it
    if not _COMPILED:
        _compile()
    lowered = text.lower()
    chosen, windows = _detectors_for(text, lowered, start)
    anchored: dict[str, list[int]] = {}  # detectors sharing an anchor share its starts
    for index in chosen:
        detector = _ALL[index]
        if detector.anchor is not None:
            key = detector.anchor.source
            if key not in anchored:
                anchored[key] = _anchored_starts(index, text, lowered, start)
            _match_at(text, index, anchored[key], found, guards)
        elif detector.run:
            for lo, hi in windows:
                if hi > start:
                    # From the window's start, even in the context before ``start``: a vendor
                    # rule's match may begin with its keyword in text already released and
                    # replace a token after it (``yandex: t1.…``, whose token can be longer
                    # than streaming holds the keyword for); what it replaces before ``start``
                    # is not reported.
                    more: list[Span] = []
                    _search(text, index, lo, hi, more, guards)
                    found.extend((max(s, start), e) for s, e in more if e > start)
        else:
            _search(text, index, start, size, found, guards)
    return _merged(found), guards


def _match_at(
    text: str, index: int, starts: list[int], found: list[Span], guards: list[Guard]
) -> None:
    """An anchored detector's matches: the same leftmost matches as a search from every
    position, tried only where one can start."""
    match_at = _ALL[index].pattern.match
    pos = 0
    for at in starts:
        if at < pos:
            continue
        match = match_at(text, at)
        if match is not None:
            pos = _judge(text, index, match, found, guards)


def _search(
    text: str, index: int, pos: int, end: int, found: list[Span], guards: list[Guard]
) -> None:
    """A detector's matches in ``text[pos:end]`` (the text, or a window around a token run)."""
    search = _ALL[index].pattern.search
    while pos <= end:
        match = search(text, pos, end)
        if match is None:
            return
        pos = _judge(text, index, match, found, guards)


def _judge(
    text: str, index: int, match: re.Match[str], found: list[Span], guards: list[Guard]
) -> int:
    """Record ``match`` (a span and a guard) if its check accepts it; where to look next. A
    rejected match does not hide one that starts inside it; a rejected one that reaches the
    end of the text is still a guard (more text could change the verdict)."""
    detector = _ALL[index]
    s, e = _span(match, detector)
    if e <= s or text.startswith(MARKER, s) or not _accepted(detector, match, text[s:e]):
        if match.end() >= len(text):
            guards.append(Guard(match.start(), match.end(), index))
        return match.start() + 1
    found.append((s, e))
    guards.append(Guard(match.start(), match.end(), index))
    return match.start() + 1 if detector.overlaps else max(match.end(), match.start() + 1)


def _accepted(detector: Detector, match: re.Match[str], value: str) -> bool:
    return detector.accept is None or detector.accept(match, value)


def find_spans(text: str, start: int = 0) -> list[Span]:
    """The spans :func:`redact_text` replaces (see :func:`scan`)."""
    return scan(text, start)[0]


def _merged(found: list[Span]) -> list[Span]:
    if len(found) < 2:
        return found
    found.sort()
    merged = [found[0]]
    for s, e in found[1:]:
        last_s, last_e = merged[-1]
        if s < last_e:
            merged[-1] = (last_s, max(last_e, e))
        else:
            merged.append((s, e))
    return merged


def apply_spans(text: str, spans: list[Span], start: int = 0, end: int | None = None) -> str:
    """``text[start:end]`` with each span (all inside that range) replaced by the marker."""
    out: list[str] = []
    at = start
    for s, e in spans:
        out.append(text[at:s])
        out.append(MARKER)
        at = e
    out.append(text[at:end])
    return "".join(out)


def redact_text(text: str) -> tuple[str, int]:
    """Replace secret shapes inside ``text``; returns the new text and the number replaced."""
    spans = scan(text)[0]
    if not spans:
        return text, 0
    return apply_spans(text, spans), len(spans)


def looks_secret(text: str) -> bool:
    """Whether redaction would change ``text``."""
    return bool(find_spans(text))


def redact_value(value: Any, depth: int = 0) -> tuple[Any, int]:
    """Redact a JSON-like value (str, list, dict, scalars); returns the new value and the count.

    Every string is redacted as a value, never as part of an encoding: a string that is a JSON
    document (a tool's result, a model's arguments, an HTTP body) is decoded, its values
    redacted, and encoded again, so escaping cannot hide a secret; other strings are redacted
    as text (:func:`redact_text`). Keys are redacted as text too; a key that names a secret has
    its whole value replaced, as have a JSON Web Key's private members. A list of one-line strings
    (an argument vector) is also read as one command line, so ``["mysql", "-pX"]`` and
    ``["--password", "X"]`` lose X. Nesting deeper than :data:`MAX_DEPTH` is replaced whole."""
    if depth > MAX_DEPTH:
        return MARKER, 1
    if isinstance(value, str):
        return _redact_string(value, depth)
    if isinstance(value, dict):
        return _redact_mapping(value, depth)
    if isinstance(value, list | tuple):
        items = []
        total = 0
        for item in value:
            new, n = redact_value(item, depth + 1)
            items.append(new)
            total += n
        if len(items) > 1 and all(isinstance(i, str) and "\n" not in i for i in items):
            items, n = _redact_command_line(items)
            total += n
        return (type(value)(items) if isinstance(value, tuple) else items), total
    return value, 0


def _redact_string(text: str, depth: int) -> tuple[str, int]:
    body = text.strip()
    if len(body) >= 2 and body[0] + body[-1] in ("{}", "[]"):
        try:
            document = msgspec.json.decode(body)
        except (msgspec.DecodeError, RecursionError):
            pass  # not JSON (or built to exhaust the stack): redacted as text
        else:
            clean, count = redact_value(document, depth + 1)
            if not count:
                return text, 0
            head = text[: len(text) - len(text.lstrip())]
            tail = text[len(text.rstrip()) :]
            return head + _encode_like(clean, body) + tail, count
    return redact_text(text)


_INDENT = re.compile(r"\n([ \t]+)\S")


def _encode_like(value: Any, original: str) -> str:
    """``value`` as JSON, laid out as ``original`` was: compact, or indented as its first
    indented line."""
    out = msgspec.json.encode(value)
    indent = _INDENT.search(original)
    if indent is not None:
        out = msgspec.json.format(out, indent=len(indent.group(1).expandtabs(4)))
    return out.decode()


def _redact_mapping(value: dict[Any, Any], depth: int) -> tuple[dict[Any, Any], int]:
    out: dict[Any, Any] = {}
    total = 0
    jwk = "kty" in value
    for key, item in value.items():
        if isinstance(key, str):
            clean_key, n = redact_text(key)
            if n:
                total += n
                while clean_key in out or clean_key in value:
                    clean_key += "'"  # two keys redacted alike stay two keys
                key = clean_key
            secret = is_secret_key(key) or (jwk and key in _JWK_PRIVATE)
            if isinstance(item, str) and not secret:
                secret = secret_pair(key, item)  # {"slack_token": "..."} as 'slack_token="..."'
            if secret and is_handle(item, looks_secret):
                out[key] = item  # a vault handle names a secret, holds none (terms.py)
                continue
            if (
                secret
                and item not in (None, "", MARKER)
                and not (isinstance(item, str) and is_placeholder(item))
            ):
                out[key] = MARKER
                total += 1
                continue
        out[key], n = redact_value(item, depth + 1)
        total += n
    return out, total


def _redact_command_line(items: list[str]) -> tuple[list[str], int]:
    """Redact an argument vector read as one command line (a value quoted when it holds a
    space), mapping what is found back onto the items."""
    parts: list[str] = []
    ranges: list[Span] = []
    at = 0
    for item in items:
        quoted = any(c.isspace() for c in item) and '"' not in item
        text = f'"{item}"' if quoted else item
        ranges.append((at + quoted, at + quoted + len(item)))
        parts.append(text)
        at += len(text) + 1
    spans = find_spans(" ".join(parts))
    if not spans:
        return items, 0
    out = []
    for item, (lo, hi) in zip(items, ranges, strict=True):
        inside = [(max(s, lo) - lo, min(e, hi) - lo) for s, e in spans if s < hi and e > lo]
        out.append(apply_spans(item, inside) if inside else item)
    return out, len(spans)


_VALID_IDENTIFIERS: set[tuple[Identifier, str]] = set()
"""Identifier values found valid, by kind: the same principal, tool name or channel is on
most events, and its verdict (the pattern, the detectors: both fixed) never changes. Only
valid values are kept (a refused one may be a secret); cleared when full. Sized for the values
in use at once: every session id is one, and 65,536 of them held ~9 MiB after 100,000 sessions."""
_VALID_IDENTIFIERS_MAX = 8_192


def _identifier_problem(kind: Identifier, value: object) -> str | None:
    """``kind.problem(value)``, remembered for valid text."""
    if type(value) is not str:
        return kind.problem(value, looks_secret)
    key = (kind, value)
    if key in _VALID_IDENTIFIERS:
        return None
    problem = kind.problem(value, looks_secret)
    if problem is None:
        if len(_VALID_IDENTIFIERS) >= _VALID_IDENTIFIERS_MAX:
            _VALID_IDENTIFIERS.clear()
        _VALID_IDENTIFIERS.add(key)
    return problem


def redact_event(event: T) -> T:
    """Return ``event`` with every free-text field redacted and ``redacted`` incremented, after
    checking its identifier and ``Literal`` fields.

    Raises :class:`events.fields.InvalidField` (an ``AppendRejected``) naming the field when an
    identifier does not match its pattern or looks like a secret. Events with nothing secret in
    them are returned unchanged (the same object).
    """
    plan = plan_of(type(event))
    changes: dict[str, Any] = {}
    total = 0
    for name, rule in plan.rules:
        value = getattr(event, name)
        if isinstance(rule, Text):
            if value is None:
                continue
            # A string (most free text) goes straight to what redact_value would call.
            new, n = _redact_string(value, 0) if type(value) is str else redact_value(value)
            if n:
                changes[name] = new
                total += n
        elif value is None or value == "":
            continue  # unset: an empty identifier holds nothing
        elif isinstance(rule, Check):
            for item in value if rule.many else (value,):
                if item == "":
                    continue
                problem = _identifier_problem(rule.kind, item)
                if problem is not None:
                    raise InvalidField(kind_of(event), name, problem)
        elif isinstance(rule, OneOf):
            for item in value if rule.many else (value,):
                if item not in rule.allowed:
                    allowed = ", ".join(sorted(map(str, rule.allowed)))
                    raise InvalidField(kind_of(event), name, f"must be one of {allowed}")
    if not total:
        return event
    changes["redacted"] = getattr(event, "redacted", 0) + total
    return msgspec.structs.replace(event, **changes)
