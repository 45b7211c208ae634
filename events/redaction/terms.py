"""Exact-match redaction terms: values known to be secret (the vault's), on top of the detectors.

The detectors (:mod:`events.redaction.redact`) find secrets by their shape; a value the node
holds in its vault is known exactly, whatever its shape, so every text a tool runtime returns is
scrubbed of it first (:meth:`ExactTerms.scrub`). A value is also found as a tool would echo it:

- as written, JSON-escaped (a runtime's JSON result; non-ASCII as is or as ``\\u`` and four
  hex digits), and URL-encoded (``%XX``, with or without ``/`` kept, and ``+`` for a space);
- base64-encoded (standard and URL-safe alphabets), at each of the three byte alignments a value
  can have inside a longer encoded text (``Basic base64(user:secret)``): the characters that
  only the value's bytes determine, so the bytes around it do not matter.

A handle is not a secret, and redaction keeps it (:func:`is_handle`): ``{"vault": "gh"}`` or
``"Bearer ${vault:gh}"`` under a key that names a secret (``Authorization``) would otherwise be
replaced whole, and the call would run without it. The handle's syntax is the tools'
(``tools/handles.py``, which cannot import this package; ``tests/events/redaction/
test_terms.py`` holds the two to the same handles).

Forms shorter than :data:`MIN_FORM_CHARS` are not searched for (a short base64 fragment would
match ordinary text); the vault refuses values shorter than that (``actors/vault/decide.py``).
Base64 wrapped across lines (MIME's 76 columns) is not found.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from events.fields import VAULT_NAME
from events.redaction.detectors import MARKER

MIN_FORM_CHARS = 8
"""The shortest form searched for, and the shortest value a vault keeps."""


def forms(value: str) -> set[str]:
    """Every text ``value`` is searched as (see the module docstring)."""
    raw = value.encode()
    out = {
        value,
        msgspec.json.encode(value).decode()[1:-1],
        json.dumps(value)[1:-1],  # non-ASCII as \u and four hex digits
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value, safe=""),
    }
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode()
        start = -(-shift * 8 // 6)  # the first character no byte before the value reaches
        end = (shift + len(raw)) * 8 // 6  # the last one no byte after it reaches
        middle = encoded[start:end]
        out.add(middle)
        out.add(middle.translate(_URL_SAFE))
    return {form for form in out if len(form) >= MIN_FORM_CHARS}


_URL_SAFE = str.maketrans("+/", "-_")
_HANDLE_TEXT = re.compile(r"(?:[A-Za-z][A-Za-z0-9_-]{0,19} )?\$\{vault:([^}]*)\}")
"""Text that is one handle, after at most an auth scheme (``Bearer ${vault:gh}``)."""


def is_handle(value: Any, looks_secret: Callable[[str], bool]) -> bool:
    """Whether ``value`` is a vault handle and nothing else: ``{"vault": NAME}``, or text that
    is ``${vault:NAME}`` after at most a scheme word, NAME a valid secret name that does not
    itself look like a secret (a token cannot pass as a name)."""
    if isinstance(value, dict) and len(value) == 1:
        name = value.get("vault")
    elif isinstance(value, str) and (match := _HANDLE_TEXT.fullmatch(value)) is not None:
        name = match.group(1)
    else:
        return False
    return isinstance(name, str) and VAULT_NAME.problem(name, looks_secret) is None


class ExactTerms:
    """A set of secret values, searched for in every form of :func:`forms`; immutable."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        found: set[str] = set()
        for value in values:
            found |= forms(value)
        # Longest first: a form that contains another is replaced whole.
        ordered = sorted(found, key=lambda f: (-len(f), f))
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def scrub(self, text: str) -> tuple[str, int]:
        """``text`` with every form of every value replaced by the marker, and how many were."""
        if self._pattern is None or not text:
            return text, 0
        return self._pattern.subn(MARKER, text)
