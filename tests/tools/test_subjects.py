"""Argument-bound grants: what a prefix covers, tried the way an agent would try to slip past it."""

from __future__ import annotations

import pytest

from tools.builtins import EchoArgs
from tools.files import FsListArgs, FsReadArgs, FsWriteArgs
from tools.http_fetch import HttpFetchArgs
from tools.shell import ShellArgs
from tools.subjects import arguments_digest, covered, parse_prefix, prefix_kind


def _covers(args: object, text: str) -> bool:
    return covered(args, parse_prefix(type(args), text))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("docs/a.md", True),
        ("docs", True),
        ("./docs/sub/../b.md", True),
        ("docs2/a.md", False),
        ("doc", False),
        ("docs/../secrets.txt", False),
        ("../docs/a.md", False),
        ("/docs/a.md", False),
        ("docs/../../docs/a.md", False),
    ],
)
def test_a_path_prefix_covers_only_paths_inside_it(path: str, ok: bool) -> None:
    assert _covers(FsReadArgs(path=path), "docs") is ok
    assert _covers(FsWriteArgs(path=path, content=""), "docs/") is ok


def test_a_path_prefix_must_stay_inside_the_workspace() -> None:
    for bad in ("../x", "/etc", "", "   "):
        with pytest.raises(ValueError):
            parse_prefix(FsListArgs, bad)


@pytest.mark.parametrize(
    ("method", "url", "ok"),
    [
        ("GET", "https://api.example.com/v1/items?x=1", True),
        ("GET", "https://API.example.com:443/v1", True),
        ("POST", "https://api.example.com/v1/items", False),
        ("GET", "http://api.example.com/v1/items", False),
        ("GET", "https://api.example.com:8443/v1/items", False),
        ("GET", "https://api.example.com.evil.org/v1/items", False),
        ("GET", "https://api.example.com@evil.org/v1/items", False),
        ("GET", "https://api.example.com/v10/items", False),
        ("GET", "https://api.example.com/v1/../admin", False),
        ("GET", "https://api.example.com/v1/%2e%2e/admin", False),
        ("GET", "https://api.example.com/v1%2F..%2Fadmin", False),
    ],
)
def test_a_url_prefix_compares_method_origin_and_path_segments(
    method: str, url: str, ok: bool
) -> None:
    assert _covers(HttpFetchArgs(url=url, method=method), "https://api.example.com/v1") is ok  # type: ignore[arg-type]


def test_a_url_prefix_names_its_method_and_no_query() -> None:
    post = HttpFetchArgs(url="https://h.example/a", method="POST")
    assert _covers(post, "POST https://h.example/")
    for bad in ("ftp://h.example/", "https://h.example/?q=1", "GET POST https://h.example", "x"):
        with pytest.raises(ValueError):
            parse_prefix(HttpFetchArgs, bad)


def test_an_argv_prefix_is_split_into_words_like_a_shell_would() -> None:
    call = ShellArgs(argv=("git", "log", "--oneline"))
    assert _covers(call, "git log")
    assert _covers(call, "'git' \"log\"")
    assert not _covers(call, "git lo")
    assert not _covers(ShellArgs(argv=("git", "log x")), "git log")
    with pytest.raises(ValueError, match="cannot split"):
        parse_prefix(ShellArgs, "git 'log")


def test_tools_without_a_subject_take_no_prefix() -> None:
    assert prefix_kind(EchoArgs) is None
    assert prefix_kind(ShellArgs) == "argv"
    with pytest.raises(ValueError, match="cannot be bound to a prefix"):
        parse_prefix(EchoArgs, "a")


def test_the_digest_is_of_the_validated_call_not_its_spelling() -> None:
    assert arguments_digest(ShellArgs(argv=("a",))) == arguments_digest(
        ShellArgs(argv=("a",), cwd=None)
    )
    assert arguments_digest(ShellArgs(argv=("a",))) != arguments_digest(ShellArgs(argv=("a", "")))
