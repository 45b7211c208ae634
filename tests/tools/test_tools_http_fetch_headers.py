"""http.fetch refuses, before any connection, headers HTTP cannot carry: a tool error naming
the header (never echoing its value), never an exception out of the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.tools.conftest import LoopbackServer
from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.http_fetch import HttpRuntime

SECRET = "s3cr3t-value"
ALLOWED = ToolsConfig(http_allowlist=("127.0.0.1",), http_allow_private=("127.0.0.1/32",))


def fetch(workspace: Path, url: str, headers: dict[str, str]) -> tuple[bool, str | None, str]:
    catalog = ToolCatalog([HttpRuntime(ALLOWED)])
    args = catalog.validate("http.fetch", {"url": url, "headers": headers})
    result = catalog.execute("http.fetch", args, ExecutionContext.start(workspace, 10))
    return result.ok, result.error_kind, result.error or ""


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        (
            {"X-Note": f"a\r\nAuthorization: Bearer {SECRET}"},
            "headers.X-Note: the value has a carriage return (CR) at offset 1",
        ),
        ({"X-Note": f"{SECRET}\n"}, "headers.X-Note: the value has a line feed (LF)"),
        ({"X-Note": f"{SECRET}\x00"}, "headers.X-Note: the value has a NUL byte"),
        ({"X-Note": f"{SECRET}\x7f"}, "the control character U+007F"),
        ({"X-Note": f"{SECRET}\x1b[0m"}, "the control character U+001B"),
        ({"X-Note": f"caf\u00e9 {SECRET}"}, "the non-ASCII character U+00E9"),
        (
            {f"X-Note\r\nAuthorization: {SECRET}": "v"},
            "headers.X-Note…: not a valid HTTP header name (a carriage return (CR))",
        ),
        ({f"X Note{SECRET}": "v"}, "headers.X…: not a valid HTTP header name (the character ' ')"),
        ({f"X:{SECRET}": "v"}, "headers.X…: not a valid HTTP header name (the character ':')"),
        ({"": "v"}, "headers.: not a valid HTTP header name (it is empty)"),
        ({" Host": "evil"}, "headers.…: not a valid HTTP header name (the character ' ')"),
        ({"HOST": "evil"}, "headers.HOST: may not be set by the caller"),
    ],
)
def test_headers_http_cannot_carry_are_invalid_naming_the_header(
    workspace: Path, http_server: LoopbackServer, headers: dict[str, str], says: str
) -> None:
    ok, kind, error = fetch(workspace, f"{http_server.base}/hello", headers)
    assert (ok, kind) == (False, "invalid")
    assert says in error, error
    assert SECRET not in error


def test_headers_are_checked_before_any_connection(workspace: Path) -> None:
    # nothing listens on port 9: a connection attempt would be a "failed" error
    ok, kind, error = fetch(workspace, "http://127.0.0.1:9/", {"X": "a\rb"})
    assert (ok, kind) == (False, "invalid"), error


def test_tabs_spaces_and_visible_ascii_are_sent(
    workspace: Path, http_server: LoopbackServer
) -> None:
    ok, _, error = fetch(
        workspace, f"{http_server.base}/headers", {"X-Probe": "a\tb c ~!\"#$%&'()*+,-./:;<=>?@[]"}
    )
    assert ok, error


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(headers=st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=3))
def test_any_headers_give_a_result_never_an_exception(
    workspace: Path, headers: dict[str, str]
) -> None:
    ok, kind, error = fetch(workspace, "http://127.0.0.1:9/", headers)
    assert not ok
    assert kind in ("invalid", "failed"), (kind, error)
