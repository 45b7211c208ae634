"""Redaction of secret-looking keys and values, applied to free-form fields before hashing.

A secret handed to reel must never reach the journal's bytes, so redaction runs on the event
before it is encoded: what is hashed and stored is already clean. Only the fields an event class
lists in ``redact_fields`` are scanned (message text, tool arguments and results, provider
errors); reel's own schema fields are never touched, so ``prompt_tokens`` or a model's output
"tokens" stay as they are.

Two rules:

* a mapping key that names a secret (``password``, ``api_key``, ``authorization``, ``cookie``,
  ``credential``, ``private_key``, ``access_token`` ...) has its whole value replaced;
* inside strings, known secret shapes are replaced in place: provider API keys (``sk-...``),
  GitHub tokens (``ghp_...``, ``github_pat_...``), AWS access key ids, Slack and Google keys,
  JWTs, ``Bearer``/``Basic`` credentials, PEM private key blocks, and ``password=...``-style pairs
  (the key is kept, the value replaced).

Each replacement counts once; the event records the total in ``redacted``.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

MARKER = "[REDACTED]"

_SECRET_KEY_PARTS = (
    "secret",
    "password",
    "passwd",
    "passphrase",
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
)
_SECRET_KEYS_EXACT = frozenset({"token", "pin", "otp", "pwd"})
# A part counts only as whole words of the key (``x_api_key``, ``credentials``), so counts such
# as ``valid_tokens`` or ``paid_tokens`` are not taken for an ``id_token``.
_SECRET_KEY_RE = re.compile(r"(?:^|_)(?:" + "|".join(_SECRET_KEY_PARTS) + r")s?(?:$|_)")

_PAIR_KEY = (
    r"(?:password|passwd|passphrase|pwd|secret|client[_-]?secret|api[_-]?key|apikey|"
    r"access[_-]?token|refresh[_-]?token|auth[_-]?token|access[_-]?key|private[_-]?key|token)"
)
_VALUE_PATTERNS = (
    # PEM private key blocks, terminated or not.
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----|[\s\S]*)",
    # Segments may hold "_" (sk-ant-api03-..., sk-proj-... keys are base64url); trailing short
    # segments are taken too, so no part of the key survives.
    r"\bsk-(?:[A-Za-z0-9_]+-)*[A-Za-z0-9_]{16,}(?:-[A-Za-z0-9_]+)*",
    r"\bgh[pousr]_[A-Za-z0-9]{20,}",
    r"\bgithub_pat_[A-Za-z0-9_]{20,}",
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b",
    r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    r"(?i:\b(?:bearer|basic))\s+[A-Za-z0-9._~+/-]{8,}=*",
    # Cookie headers carry session credentials: everything up to the end of the line goes.
    r"(?i:\b(?:set-)?cookie)\s*:\s*[^\r\n]+",
)
_VALUE_RE = re.compile("|".join(f"(?:{p})" for p in _VALUE_PATTERNS))
_PAIR_RE = re.compile(
    r"(?i)(?<![A-Za-z0-9])((?:[A-Za-z0-9]+[_-])*" + _PAIR_KEY + r")(?![A-Za-z0-9])"
    # An already-placed marker is matched whole, so ``_pair`` leaves it (and its count) alone.
    # A quoted value is taken whole (``password: "two words"``).
    r"([\"']?\s*[:=]\s*)(\"[^\"]*\"|'[^']*'|[\"']?\[REDACTED\][\"']?|[^\s\"'&,;}\]]+)"
)

_VALUE_HINTS = (
    "private key",
    "sk-",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "xox",
    "aiza",
    "eyj",
    "bearer",
    "basic",
    "cookie",
)
_AWS_HINTS = ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA")
"""Literals one of which every value pattern contains (lower-cased, or as is for the AWS key id
prefixes): a text with none of them cannot match, and skipping the regex keeps redaction cheap
for ordinary text."""

T = TypeVar("T")


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (case, ``-`` and spaces ignored)."""
    norm = key.strip().lower().replace("-", "_").replace(" ", "_")
    if norm in _SECRET_KEYS_EXACT:
        return True
    return _SECRET_KEY_RE.search(norm) is not None


def redact_text(text: str) -> tuple[str, int]:
    """Replace secret shapes inside ``text``; returns the new text and the number replaced."""
    count = 0

    def _value(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return MARKER

    def _pair(match: re.Match[str]) -> str:
        nonlocal count
        value = match.group(3)
        if value.strip("\"'") == MARKER:
            return match.group(0)
        count += 1
        quote = value[0] if value[0] in "\"'" else ""
        return match.group(1) + match.group(2) + quote + MARKER + quote

    lowered = text.lower()
    if any(hint in lowered for hint in _VALUE_HINTS) or any(h in text for h in _AWS_HINTS):
        text = _VALUE_RE.sub(_value, text)
    if ":" in text or "=" in text:
        text = _PAIR_RE.sub(_pair, text)
    return text, count


def redact_value(value: Any) -> tuple[Any, int]:
    """Redact a JSON-like value (str, list, dict, scalars); returns the new value and the count."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        total = 0
        for key, item in value.items():
            if isinstance(key, str) and is_secret_key(key) and item not in (None, "", MARKER):
                out[key] = MARKER
                total += 1
            else:
                out[key], n = redact_value(item)
                total += n
        return out, total
    if isinstance(value, list | tuple):
        items = []
        total = 0
        for item in value:
            new, n = redact_value(item)
            items.append(new)
            total += n
        return (type(value)(items) if isinstance(value, tuple) else items), total
    return value, 0


def redact_event(event: T) -> T:
    """Return ``event`` with its ``redact_fields`` cleaned and ``redacted`` incremented.

    Events without free-form fields, or with nothing secret in them, are returned unchanged.
    """
    fields: frozenset[str] = getattr(event, "redact_fields", frozenset())
    if not fields:
        return event
    changes: dict[str, Any] = {}
    total = 0
    for name in fields:
        new, n = redact_value(getattr(event, name))
        if n:
            changes[name] = new
            total += n
    if not total:
        return event
    changes["redacted"] = getattr(event, "redacted", 0) + total
    return msgspec.structs.replace(event, **changes)  # type: ignore[type-var]
