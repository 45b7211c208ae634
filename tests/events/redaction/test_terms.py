"""Exact-match redaction terms (events/redaction/terms.py): each form a tool may echo a value
in is found, whatever surrounds it; handles are kept under secret keys and read alike by the
tools' parser (tools/handles.py)."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from events.redaction.redact import looks_secret, redact_value
from events.redaction.terms import MIN_FORM_CHARS, ExactTerms, is_handle
from tools.handles import VaultHandle, names_in

VALUE = 'p@ss wörd/+"quoted"\\-42'
"""Characters every encoding treats differently: space, slash, plus, quote, backslash, é."""


def encodings(value: str) -> list[str]:
    raw = value.encode()
    out = [
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        urllib.parse.quote(value),
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote_plus(value),
    ]
    for before in (b"", b"u", b"us", b"user:"):
        for after in (b"", b"!", b"!!"):
            out.append(base64.b64encode(before + raw + after).decode())
            out.append(base64.urlsafe_b64encode(before + raw + after).decode())
    return out


@pytest.mark.parametrize("encoded", encodings(VALUE))
def test_every_form_is_found_inside_other_text(encoded: str) -> None:
    terms = ExactTerms([VALUE])
    scrubbed, count = terms.scrub(f"before {encoded} after")
    assert count >= 1, encoded
    for form in encodings(VALUE):
        core = form.strip("=")[4:-4]  # no stretch of the value's own characters survives
        assert len(core) < MIN_FORM_CHARS or core not in scrubbed, (encoded, scrubbed)


def test_no_terms_change_nothing() -> None:
    assert not ExactTerms()
    assert ExactTerms().scrub(VALUE) == (VALUE, 0)


@pytest.mark.parametrize(
    ("value", "handle"),
    [
        ({"vault": "gh"}, True),
        ("${vault:gh}", True),
        ("Bearer ${vault:gh_token.v2}", True),
        ({"vault": "gh", "other": 1}, False),
        ({"vault": "9gh"}, False),
        ("Bearer ${vault:gh} and more", False),
        ("secret ${vault:gh}x", False),
        ("Bearer ${vault:ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X}", False),
        ("Bearer hunter2-real-value", False),
    ],
)
def test_a_handle_is_kept_under_a_secret_key_and_nothing_else_is(
    value: object, handle: bool
) -> None:
    assert is_handle(value, looks_secret) is handle
    clean, _ = redact_value({"Authorization": value})
    assert (clean["Authorization"] == value) is handle
    if handle:
        as_tools_read = value if isinstance(value, str) else VaultHandle(value["vault"])  # type: ignore[index]
        assert names_in(as_tools_read), value
