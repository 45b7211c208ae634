"""Vendor token shapes from gitleaks' published rule set, loaded as data.

Hundreds of services issue credentials with a recognisable shape (a prefix such as ``glpat-``,
``xoxb-``, ``AGE-SECRET-KEY-1``, or a vendor's name as the key of an assignment). Writing them by
hand falls behind; gitleaks (MIT) maintains them. Its default configuration is vendored
unchanged in ``events/redaction/rules/gitleaks.toml`` (licence beside it), pinned to :data:`PIN`,
and loaded here as data, with gitleaks' own semantics:

* a rule runs only on text holding one of its ``keywords`` (lower-cased);
* its secret is its ``secretGroup``, else the first capture group that matched, else the match;
* a secret whose Shannon entropy is at most the rule's ``entropy`` is not one;
* the global and the rule's allowlists (``regexes`` against the secret, the match or the line,
  ``stopwords``, condition ``OR``/``AND``) keep look-alikes; an allowlist that needs a file path
  or a commit cannot apply to text and is ignored (under ``AND`` it never allows).

The file is read once, by :func:`derive`, into :data:`DERIVED_FILE`, which :func:`load` reads:
a node's start parses and compiles none of the ~220 expressions (each is compiled when a text
first holds its keyword).

Go's RE2 syntax is translated then (:func:`translate`): a flag group in the middle of a
pattern (``p8e-(?i)[a-z0-9]{32}``) becomes a scoped group, ``\\z`` becomes ``\\Z`` and POSIX
classes (``[[:alnum:]]``) are spelt out; patterns compile with ``re.ASCII`` as RE2's classes
are. ``tests/events/redaction/test_vendor_rules.py`` proves every rule compiles, has no nested
unbounded repetition (Python's engine backtracks where RE2 does not), matches an example generated
from its own expression, and is redacted through :func:`events.redaction.redact.redact_text`.

Two departures, for cost: a rule whose secret is a run of at least :data:`RUN` token
characters is tried only in windows around such runs (its keyword looked for there too), and
a rule whose capture group sits inside a repetition replaces its whole match. Rules in
:data:`EXCLUDED` are not loaded, each for the reason given there.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from importlib import resources
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any, NamedTuple

import msgspec

from events.redaction.detectors import MARKER, Detector, Expression

RULES_FILE = "gitleaks.toml"
DERIVED_FILE = "gitleaks.derived.json"
"""What :func:`derive` makes of :data:`RULES_FILE` (the loader reads it; see :func:`load`)."""


class Pin(NamedTuple):
    """Which upstream file is vendored: its release, commit and SHA-256 (checked when it is
    derived, and the derived table names it: checked at load)."""

    project: str
    release: str
    commit: str
    path: str
    sha256: str


PIN = Pin(
    project="github.com/gitleaks/gitleaks",
    release="v8.30.1",
    commit="83d9cd684c87d95d656c1458ef04895a7f1cbd8e",
    path="config/gitleaks.toml",
    sha256="e163e53b9e7e8a8511e77271e2b323ed057759542a6d988258afe3a1fa329caf",
)

EXCLUDED: dict[str, str] = {
    "generic-api-key": "reel's key/value detector is this family; gitleaks' version runs on "
    "any text holding key, token, api, auth or access and cost more than all of reel's "
    "redaction of a 4.5 KB tool result, for 9 of the corpus' 141 secrets, all caught anyway",
    "freemius-secret-key": "applies to .php files only (a path rule); reel sees text, no path",
    "hashicorp-tf-password": "applies to .tf/.hcl files only; reel's key/value detector covers it",
    "kubernetes-secret-yaml": "applies to YAML files only; reel's key/value detector covers it",
    "nuget-config-password": "applies to nuget.config only; reel's XML detector covers it",
    "pkcs12-file": "a file-name rule with no expression",
}
"""Rules of the vendored file that are not loaded, and why."""


class RulesError(ValueError):
    """The vendored rules file is not the pinned one, or a rule cannot be loaded."""


# --- RE2 to Python ----------------------------------------------------------------------------

_POSIX = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "digit": "0-9",
    "xdigit": "0-9a-fA-F",
    "upper": "A-Z",
    "lower": "a-z",
    "space": r" \t\n\r\f\v",
    "word": r"\w",
    "punct": r"!-/:-@\[-`{-~",
}


def translate(pattern: str) -> str:
    """A Go RE2 expression in Python's syntax (see the module docstring)."""
    out: list[str] = []
    closers: list[int] = [0]
    """Per open group: how many scoped flag groups to close with it."""
    i, size = 0, len(pattern)
    in_class = False
    while i < size:
        c = pattern[i]
        if c == "\\" and i + 1 < size:
            nxt = pattern[i + 1]
            out.append(r"\Z" if nxt == "z" and not in_class else c + nxt)
            i += 2
            continue
        if in_class:
            if pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                name = pattern[i + 2 : end] if end > 0 else ""
                if name in _POSIX:
                    out.append(_POSIX[name])
                    i = end + 2
                    continue
            if c == "[":
                out.append(r"\[")
                i += 1
                continue
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            # a ']' right after '[' or '[^' is a literal
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):
                out.append(r"\]")
                i += 1
            continue
        flags = re.match(r"\(\?([imsU-]+)\)", pattern[i:])
        if flags is not None and (i > 0 or "-" in flags.group(1)):
            out.append(f"(?{flags.group(1)}:")
            closers[-1] += 1
            i += flags.end()
            continue
        if c == "(":
            named = re.match(r"\(\?<(\w+)>", pattern[i:])
            if named is not None:
                out.append(f"(?P<{named.group(1)}>")
                i += named.end()
            else:
                out.append(c)
                i += 1
            closers.append(0)
            continue
        if c == ")":
            out.append(")" * closers.pop())
            out.append(c)
            i += 1
            continue
        out.append(c)
        i += 1
    out.append(")" * closers.pop())
    return "".join(out)


def compile_re2(pattern: str) -> re.Pattern[str]:
    return re.compile(translate(pattern), re.ASCII)


def _translated(source: str) -> Expression:
    """A translated expression, compiled on first use as RE2's classes are (``re.ASCII``)."""
    return Expression(source, re.ASCII)


# --- the checks -------------------------------------------------------------------------------


def shannon_entropy(text: str) -> float:
    """Bits per character, as gitleaks computes it."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())


class Allowlist(msgspec.Struct, frozen=True):
    """One gitleaks allowlist that can apply to text (no paths, no commits)."""

    target: str
    """``secret``, ``match`` or ``line``: what ``regexes`` are searched in."""
    regexes: tuple[str, ...]
    """Translated (:func:`translate`); compiled on first use."""
    stopwords: tuple[str, ...]
    both: bool
    """Condition ``AND``: every listed check must allow."""

    def allows(self, secret: str, match: str, line: str) -> bool:
        target = {"match": match, "line": line}.get(self.target, secret)
        by_regex = any(_translated(r).compiled().search(target) for r in self.regexes)
        lowered = secret.lower()
        by_word = any(w in lowered for w in self.stopwords)
        if self.both:
            checks = ([by_regex] if self.regexes else []) + ([by_word] if self.stopwords else [])
            return bool(checks) and all(checks)
        return by_regex or by_word


def _allowlist(spec: dict[str, Any]) -> Allowlist | None:
    both = spec.get("condition", "OR").upper() == "AND"
    needs_file = bool(spec.get("paths") or spec.get("commits"))
    if needs_file and (both or not (spec.get("regexes") or spec.get("stopwords"))):
        return None  # cannot hold for text: no path, no commit
    return Allowlist(
        target=spec.get("regexTarget", "secret"),
        regexes=tuple(compile_re2(r).pattern for r in spec.get("regexes", ())),
        stopwords=tuple(w.lower() for w in spec.get("stopwords", ())),
        both=both,
    )


def _line_of(text: str, start: int, end: int) -> str:
    return text[text.rfind("\n", 0, start) + 1 : (text.find("\n", end) + 1 or len(text) + 1) - 1]


class Acceptor(msgspec.Struct, frozen=True):
    """A rule's check (:attr:`~events.redaction.detectors.Detector.accept`): its entropy floor
    and its allowlists, the shared ones first. A value, so rules loaded two ways compare."""

    entropy: float
    allowlists: tuple[Allowlist, ...]

    def __call__(self, match: re.Match[str], secret: str) -> bool:
        if MARKER in match.group() or (self.entropy and shannon_entropy(secret) <= self.entropy):
            return False
        line = _line_of(match.string, match.start(), match.end())
        return not any(a.allows(secret, match.group(), line) for a in self.allowlists)


class Rule(NamedTuple):
    """One loaded rule: its id and the detector made of it."""

    id: str
    detector: Detector


_TAIL = re.compile(r"\(\?:\[\\x60'\"\\s;\]\|\\\\\[nr\]\|\$\)$")
"""The end most rules share (a quote, a space, ``;``, an escaped line break or the end): one
character after the secret."""
_SPACES = tuple(map(ord, " \t\n\r"))


def _takes_space(items: Any) -> bool:
    """Whether a parsed expression (``re._parser``) can match a whitespace character."""
    for op, arg in items:
        name = str(op)
        if (name == "LITERAL" and arg in _SPACES) or name in ("NOT_LITERAL", "ANY"):
            return True
        if name == "IN" and _class_takes_space(arg):
            return True
        if name == "SUBPATTERN" and _takes_space(arg[-1]):
            return True
        repeat = name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
        if repeat and arg[1] > 0 and _takes_space(arg[2]):
            return True
        if name == "BRANCH" and any(_takes_space(b) for b in arg[1]):
            return True
    return False


def _class_takes_space(items: Any) -> bool:
    negate, found = False, False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            found |= arg in _SPACES
        elif name == "RANGE":
            found |= any(arg[0] <= c <= arg[1] for c in _SPACES)
        elif name == "CATEGORY":
            found |= "SPACE" in str(arg) or "NOT" in str(arg)
    return found != negate


RUN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.~+/=-")
"""The characters of a token (see :attr:`events.redaction.detectors.Detector.run`)."""
RUN = 16
"""A rule whose secret is at least this long and made of :data:`RUN_CHARS` only is skipped on
text without such a run (most prose)."""


_CATEGORIES = {
    "CATEGORY_DIGIT": "0123456789",
    "CATEGORY_WORD": "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_",
}


def _chars(items: Any, found: set[str]) -> bool:
    """Add the characters a parsed expression can match to ``found``; False if it can match
    characters outside :data:`RUN_CHARS` (or any character)."""
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            found.add(chr(arg))
        elif name == "IN":
            for kind, value in arg:
                kind_name = str(kind)
                if kind_name == "LITERAL":
                    found.add(chr(value))
                elif kind_name == "RANGE":
                    found.update(map(chr, range(value[0], value[1] + 1)))
                elif kind_name == "CATEGORY" and str(value) in _CATEGORIES:
                    found.update(_CATEGORIES[str(value)])
                else:
                    return False
        elif name == "SUBPATTERN":
            if not _chars(arg[-1], found):
                return False
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            if not _chars(arg[2], found):
                return False
        elif name == "BRANCH":
            if not all(_chars(branch, found) for branch in arg[1]):
                return False
        elif name != "AT":
            return False
    return found <= RUN_CHARS


def _group(items: Any, number: int) -> Any:
    for op, arg in items:
        name = str(op)
        inner: list[Any] = []
        if name == "SUBPATTERN":
            if arg[0] == number:
                return arg[-1]
            inner = [arg[-1]]
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            inner = [arg[2]]
        elif name == "BRANCH":
            inner = list(arg[1])
        for sub in inner:
            found = _group(sub, number)
            if found is not None:
                return found
    return None


def min_run(tree: Any, group: int) -> int:
    """:data:`RUN` if every match's secret (``group`` of the parsed expression ``tree``) is a
    run of at least :data:`RUN` characters of :data:`RUN_CHARS`, else 0."""
    part = _group(list(tree), group) if group else list(tree)
    if part is None or not _chars(part, set()):
        return 0
    width = sre_parse.SubPattern(tree.state, part).getwidth()[0]
    return RUN if width >= RUN else 0


def _leading(items: Any) -> set[str] | None:
    """The lower-case literals one of which starts every match's first whitespace-free run
    (after optional ``[\\w.-]{0,50}?`` and anchors), or None if they cannot be told."""
    prefix = ""
    for op, arg in items:
        name = str(op)
        optional = name in ("MIN_REPEAT", "MAX_REPEAT") and not arg[0]
        if not prefix and (name == "AT" or (optional and not _takes_space([(op, arg)]))):
            continue  # an anchor, or an optional prefix that holds no space
        if name == "LITERAL":
            prefix += chr(arg).lower()
            continue
        inner: list[Any] = []
        if name == "SUBPATTERN":
            inner = [arg[-1]]
        elif name == "BRANCH":
            inner = list(arg[1])
        rests = [_leading(list(sub)) for sub in inner]
        if not inner or any(rest is None for rest in rests):
            return {prefix} if prefix else None
        return {prefix + word for rest in rests if rest is not None for word in rest}
    return {prefix} if prefix else None


def stream_triggers(tree: Any, source: str, keywords: tuple[str, ...]) -> tuple[str, ...]:
    """What streaming holds text after for a rule whose match can hold whitespace: the
    literals it starts with (``typeform`` in ``typeform_key = tfp_...``), else its keywords."""
    if not spans_words(tree, source):
        return ()
    found = _leading(list(tree))
    if found and all(len(word) >= 3 for word in found):
        return tuple(sorted(found))
    return keywords


def _quantified_group(items: Any, inside: bool = False) -> bool:
    """Whether a capture group sits inside a repetition (``([a-z0-9]{4}-){3}``): then it is
    a piece of the token, not the secret, and the whole match is replaced."""
    for op, arg in items:
        name = str(op)
        if name == "SUBPATTERN":
            if (inside and arg[0] is not None) or _quantified_group(arg[-1], inside):
                return True
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            if _quantified_group(arg[2], inside or arg[1] > 1):
                return True
        elif name == "BRANCH" and any(_quantified_group(b, inside) for b in arg[1]):
            return True
    return False


def spans_words(tree: Any, source: str) -> bool:
    """Whether a rule's match can hold whitespace before its last character (the shared
    one-character end, :data:`_TAIL`, is not counted)."""
    items = list(tree)
    if _TAIL.search(source):
        items = items[:-1]
    return _takes_space(items)


class Derived(msgspec.Struct, frozen=True):
    """One rule as :func:`derive` reads it from the vendored file."""

    id: str
    regex: str
    """Translated (:func:`translate`)."""
    keywords: tuple[str, ...]
    groups: tuple[int, ...]
    entropy: float
    allowlists: tuple[Allowlist, ...]
    """The rule's own."""
    trigger: tuple[str, ...]
    run: int


class Table(msgspec.Struct, frozen=True):
    """What :func:`derive` makes of the vendored file: kept in :data:`DERIVED_FILE`."""

    sha256: str
    """Of the file it was derived from (the pinned one)."""
    allowlists: tuple[Allowlist, ...]
    """The global ones."""
    rules: tuple[Derived, ...]


def load() -> tuple[Rule, ...]:
    """The rules of the vendored file, minus :data:`EXCLUDED`, in file order, read from
    :data:`DERIVED_FILE`: loading parses and compiles no expression (each is compiled when a
    text first holds its keyword), so it costs a few milliseconds where deriving costs a
    tenth of a second. ``tests/events/redaction/test_hints_differential.py`` holds the table
    to what :func:`derive` makes of the pinned file.

    Raises :class:`RulesError` when the table was derived from another file."""
    raw = resources.files("events.redaction").joinpath("rules", DERIVED_FILE).read_bytes()
    table = msgspec.json.decode(raw, type=Table)
    if table.sha256 != PIN.sha256:
        raise RulesError(f"events/redaction/rules/{DERIVED_FILE} is not derived from {PIN.release}")
    return _rules(table)


def load_file(raw: bytes) -> tuple[Rule, ...]:
    """The rules of ``raw``, which must be the pinned file (see :func:`derive`)."""
    return _rules(derive(raw))


def _rules(table: Table) -> tuple[Rule, ...]:
    return tuple(
        Rule(
            row.id,
            Detector(
                f"gitleaks:{row.id}",
                _translated(row.regex),
                row.keywords,
                groups=row.groups,
                accept=Acceptor(row.entropy, table.allowlists + row.allowlists),
                trigger=row.trigger,
                run=row.run,
            ),
        )
        for row in table.rules
    )


def derive(raw: bytes) -> Table:
    """What the loader needs of ``raw``, which must be the pinned file: each rule's expression
    translated, and what its parsed expression says (the groups replaced, the streaming
    triggers, the token run). ``python -m events.redaction.vendor_rules`` writes it to
    :data:`DERIVED_FILE`.

    Raises :class:`RulesError` when it is not the pinned one or a rule does not compile."""
    if hashlib.sha256(raw).hexdigest() != PIN.sha256:
        raise RulesError(
            f"events/redaction/rules/{RULES_FILE} is not gitleaks {PIN.release}'s file"
        )
    import tomllib  # only here: a loading process reads the table, not the file

    config = tomllib.loads(raw.decode())
    shared = tuple(a for a in [_allowlist(config.get("allowlist", {}))] if a is not None)
    rows: list[Derived] = []
    for spec in config.get("rules", ()):
        rule_id = spec["id"]
        if rule_id in EXCLUDED or "regex" not in spec:
            continue
        try:
            pattern = compile_re2(spec["regex"])
            own = tuple(a for a in map(_allowlist, spec.get("allowlists", ())) if a is not None)
        except re.error as exc:
            raise RulesError(f"gitleaks rule {rule_id}: {exc}") from exc
        tree = sre_parse.parse(pattern.pattern, pattern.flags)
        group = spec.get("secretGroup", 0)
        groups: tuple[int, ...] = (group,) if group else tuple(range(1, pattern.groups + 1))
        if not group and _quantified_group(list(tree)):
            groups = ()
        keywords = tuple(k.lower() for k in spec.get("keywords", ()))
        rows.append(
            Derived(
                id=rule_id,
                regex=pattern.pattern,
                keywords=keywords,
                groups=groups,
                entropy=float(spec.get("entropy", 0.0)),
                allowlists=own,
                trigger=stream_triggers(tree, pattern.pattern, keywords),
                run=min(min_run(tree, g) for g in groups) if groups else min_run(tree, 0),
            )
        )
    return Table(sha256=PIN.sha256, allowlists=shared, rules=tuple(rows))


def derived_bytes(table: Table) -> bytes:
    """:data:`DERIVED_FILE`'s content for ``table``."""
    return msgspec.json.format(msgspec.json.encode(table), indent=1) + b"\n"


if __name__ == "__main__":
    _RULES_DIR = resources.files("events.redaction").joinpath("rules")
    _TABLE = derive(_RULES_DIR.joinpath(RULES_FILE).read_bytes())
    with resources.as_file(_RULES_DIR.joinpath(DERIVED_FILE)) as _path:
        _path.write_bytes(derived_bytes(_TABLE))
