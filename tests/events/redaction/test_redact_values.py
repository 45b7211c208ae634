"""Issue 21, finding 2: redaction works on values, never on an encoding of them.

A tool's result is JSON text: a line break in a file it read is the two characters ``\\n``, a
quote inside a nested document is ``\\"`` or ``\\u0022``. Every string an event carries that is
a JSON document is decoded, its values redacted, and encoded again; other text is also read
through its escapes. These tests put the same config file through every encoding a tool makes
of it and prove each value is gone, the JSON still decodes to the same shape, and nothing else
changed."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import msgspec
import pytest

from events import MARKER, Journal, NodeKey
from events.catalog import ToolCompleted, ToolProposed
from events.redaction.detectors import LOCAL_PASSWORD_WORDS
from events.redaction.escapes import unescaped
from events.redaction.redact import MAX_DEPTH, redact_event, redact_text, redact_value
from events.redaction.redact_stream import redact_chunks

CONFIG = (
    "# app.ini\nhost=db.internal\nuser=app\npassword=Fin2-canary-a1\n"
    'api_key = "Fin2-canary-b2"\nsecret: Fin2-canary-c3\ntoken=Fin2canaryD4x\n'
)
VALUES = ("Fin2-canary-a1", "Fin2-canary-b2", "Fin2-canary-c3", "Fin2canaryD4x")
KEPT = ("host=db.internal", "user=app", "# app.ini")


def fs_read(text: str) -> str:
    return json.dumps({"path": "app.ini", "size": len(text), "content": text, "truncated": False})


def shell_run(text: str) -> str:
    return json.dumps({"exit_code": 0, "stdout": text, "stderr": "", "truncated": False})


def http_fetch(text: str) -> str:
    return json.dumps(
        {"url": "http://cfg/app.ini", "status": 200, "headers": {}, "body": text, "lossy": False}
    )


@pytest.mark.parametrize("encode", [fs_read, shell_run, http_fetch])
def test_a_config_file_in_a_tool_result_loses_every_value(encode: Any) -> None:
    result = encode(CONFIG)
    assert "\\npassword=" in result  # what the detector saw before: 'npassword=...'
    out, count = redact_value(result)
    assert count == len(VALUES)
    for value in VALUES:
        assert value not in out
    decoded = json.loads(out)
    original = json.loads(result)
    assert decoded.keys() == original.keys()
    field = next(k for k, v in original.items() if v == CONFIG)
    for kept in KEPT:
        assert kept in decoded[field]
    assert redact_value(out) == (out, 0), "idempotent"


def test_the_stored_tool_completed_event_holds_none_of_them(tmp_path: Any) -> None:
    event = ToolCompleted(
        invocation_id="i1", run_id="r1", tool="fs.read", ok=True, output=fs_read(CONFIG)
    )
    clean = redact_event(event)
    assert clean.redacted == len(VALUES)
    with Journal(tmp_path / "journal.db", node_key=NodeKey.load_or_create(tmp_path / "k")) as j:
        j.append("tool/i1", [event], expected_seq=0)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("journal"))
    for value in VALUES:
        assert value.encode() not in raw


@pytest.mark.parametrize(
    "text",
    [
        "{\\u0022password\\u0022: \\u0022U22-canary-z9\\u0022}",  # \u0022 quotes, not JSON
        '{"cfg": "{\\u0022password\\u0022: \\u0022U22-canary-z9\\u0022}"}',  # inside JSON
        '{"a": "{\\"b\\": \\"{\\\\\\"password\\\\\\": \\\\\\"U22-canary-z9\\\\\\"}\\"}"}',  # 3 deep
        "b'host=db\\npassword=U22-canary-z9\\n'",  # a Python bytes literal
        '{"stdout": "{\\"password\\": \\"U22-canary-z9\\"',  # JSON cut short (truncated output)
        "line one\\r\\npassword: U22-canary-z9\\r\\n",
        "user=app\\x0apassword=U22-canary-z9",
    ],
)
def test_no_escape_hides_a_value(text: str) -> None:
    out, count = redact_value(text)
    assert count >= 1 and "U22-canary-z9" not in out, out
    assert redact_value(out) == (out, 0)


def test_json_is_laid_out_as_it_was() -> None:
    pretty = json.dumps({"db": {"host": "db", "password": "Lay-canary-1"}, "n": 1}, indent=4)
    out, _ = redact_value(pretty)
    assert out == json.dumps({"db": {"host": "db", "password": MARKER}, "n": 1}, indent=4)
    compact = json.dumps({"password": "Lay-canary-1"}, separators=(",", ":"))
    assert redact_value(compact)[0] == '{"password":"[REDACTED]"}'
    assert redact_value("  [1, 2]  ") == ("  [1, 2]  ", 0)  # nothing found: the same text


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (["mysql", "-h", "db", "-pArgv-canary-1", "shop"], "-p"),
        (["psql", "--password", "Argv canary 2 with spaces"], "--password"),
        (["curl", "-u", "admin:Argv-canary-3", "https://x.test"], "https://x.test"),
        (["sshpass", "-p", "Argv-canary-4", "ssh", "host"], "sshpass"),
        (["env", "DBPASSWORD=Argv-canary-5", "app"], "DBPASSWORD="),
    ],
)
def test_an_argument_vector_is_read_as_its_command_line(argv: list[str], kept: str) -> None:
    arguments = {"argv": argv}
    out, count = redact_value(arguments)
    flat = json.dumps(out)
    assert count >= 1 and "Argv" not in flat and kept in flat
    assert len(out["argv"]) == len(argv)  # one item stays one item


def test_harmless_argument_vectors_are_kept() -> None:
    for argv in (
        ["docker", "run", "-p", "8080:80", "-u", "1000:1000", "nginx"],
        ["ssh", "-p", "2222", "host"],
        ["unzip", "-p", "a.zip", "f"],
        ["git", "push", "-u", "origin", "main"],
    ):
        assert redact_value(argv) == (argv, 0)


def test_mapping_entries_are_judged_as_their_key_and_value() -> None:
    doc = {
        "slack_token": "abc123secretvalue",  # a secret's key: the value goes
        "DBPassword": "x",
        "contraseña": "Es-canary",
        "nextPageToken": "CAUQAA",  # a cursor, not a credential
        "SERVER_AUTH": "1.3.6.1.5.5.7.3.1",
        "password": "${{ secrets.DB_PASSWORD }}",  # a placeholder, kept
        "max_tokens": 512,
        "jwk": {"kty": "EC", "crv": "P-256", "x": "pub", "d": "Jwk-private-canary"},
    }
    out, count = redact_value(doc)
    assert out["slack_token"] == out["DBPassword"] == out["contraseña"] == MARKER
    assert out["jwk"]["d"] == MARKER and out["jwk"]["x"] == "pub"
    assert out["nextPageToken"] == "CAUQAA" and out["SERVER_AUTH"] == "1.3.6.1.5.5.7.3.1"
    assert out["password"] == "${{ secrets.DB_PASSWORD }}" and out["max_tokens"] == 512
    assert count == 4


def test_a_document_built_to_exhaust_the_stack_is_refused_without_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    assert redact_value(deep) == (deep, 0)  # msgspec refuses it: read as text
    nested: Any = "password=Deep-canary"
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    out, count = redact_value(nested)
    assert "Deep-canary" not in json.dumps(out) and count >= 1
    event = ToolProposed(
        invocation_id="i", run_id="r", session_id="s", call_id="c", tool="t", arguments=nested
    )
    assert "Deep-canary" not in msgspec.json.encode(redact_event(event).arguments).decode()


def test_text_that_is_not_json_is_redacted_as_text() -> None:
    assert redact_value("{not json} password=Txt-canary9") == (
        "{not json} password=[REDACTED]",
        1,
    )


def test_the_escape_view_maps_back_to_the_written_characters() -> None:
    text = 'a\\nb\\u0022c\\\\"d'
    view = unescaped(text)
    assert view is not None and view.text == 'a\nb"c"d'
    assert [view.start(i) for i in range(len(view.text))] == [0, 1, 3, 4, 10, 11, 14]
    assert view.end(2) == 3 and view.end(4) == 10 and view.end(len(view.text)) == len(text)
    assert view.find(3) == 2 and view.find(4) == 3 and view.find(11) == 5
    assert unescaped("no escapes") is None
    assert redact_text("x\\u0022token\\u0022: \\u0022Tok9canaryValue\\u0022")[0] == (
        "x\\u0022token\\u0022: \\u0022[REDACTED]\\u0022"
    )


@pytest.mark.parametrize(
    "text",
    [
        "zip -r -P Zip-canary-50 backup.zip data/ mysql -h db -u root -pMy5qlCanary41 shop"
        " zip -r -P Zip-canary-50 backup.zip data/",
        "unzip a.zip x; sshpass -p Ssh-canary-7 ssh host && zip -r -P Zip-canary-50 b.zip .",
    ],
)
def test_a_command_inside_another_ones_gap_loses_its_password(text: str) -> None:
    """A program-and-flag match runs across a gap (``backup.zip`` ... the next ``zip -P``): a
    command lying in that gap is still found (hypothesis found the first case)."""
    redacted, _ = redact_text(text)
    assert not [w for w in ("My5qlCanary41", "Zip-canary-50", "Ssh-canary-7") if w in redacted]


@pytest.mark.parametrize("word", LOCAL_PASSWORD_WORDS)
def test_a_key_in_another_language_is_one_composed_or_not(word: str) -> None:
    """``lösenord`` with ``ö`` as ``o`` and a combining diaeresis (NFD, as macOS file names and
    some keyboards give it) is the same key: until 2026-11-29 the expressions held both forms
    but the literals that gate them only the composed one, and 9 of these words' values went
    out whole, streamed or not."""
    for form in ("NFC", "NFD"):
        text = f"then {unicodedata.normalize(form, word)}: Xq7-canary-19Lp and more"
        assert "canary" not in redact_text(text)[0], form
        assert "canary" not in redact_chunks(list(text))[0], form
