"""The web console's files at / (public: they hold no data), confined to static/."""

from __future__ import annotations

from pathlib import Path

import pytest

import transports.http
from tests.transports.http.httpkit import HttpNode
from transports.http.console import STATIC_DIR, static_file
from transports.http.failures import ApiError


def test_index_is_served_at_the_root_without_a_token(node: HttpNode) -> None:
    reply = node.call("GET", "/", auth=None)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/html")
    assert reply.headers["x-content-type-options"] == "nosniff"
    index = STATIC_DIR / "index.html"
    if index.is_file():
        assert reply.body == index.read_bytes()
    else:
        assert b"not installed" in reply.body


def test_files_are_served_by_name_and_under_static(node: HttpNode) -> None:
    files = sorted(p for p in STATIC_DIR.glob("*") if p.is_file() and p.name != "index.html")
    if not files:
        pytest.skip("the console has no files besides index.html in this build")
    for path in files:
        for url in (f"/{path.name}", f"/static/{path.name}"):
            reply = node.call("GET", url, auth=None)
            assert reply.status == 200, url
            assert reply.body == path.read_bytes()


@pytest.mark.parametrize(
    "url",
    [
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/..%2Fserver.py",
        "/static/.hidden",
        "/nothing.js",
        "/static/",
    ],
)
def test_nothing_outside_static_is_served(node: HttpNode, url: str) -> None:
    reply = node.call("GET", url, auth=None)
    assert reply.status in (401, 404), url
    assert b"import" not in reply.body


def test_static_file_refuses_escapes(tmp_path: Path) -> None:
    root = tmp_path / "static"
    root.mkdir()
    (root / "a.js").write_text("ok")
    (tmp_path / "secret").write_text("no")
    (root / "link").symlink_to(tmp_path / "secret")
    assert static_file("a.js", root) == (root / "a.js").resolve()
    for bad in ("../secret", "link", ".a.js", "", "a.js/../../secret", "nested/none"):
        with pytest.raises(ApiError) as caught:
            static_file(bad, root)
        assert caught.value.status == 404


def test_the_public_names_are_complete() -> None:
    public = {n for n in dir(transports.http) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(transports.http, n)).__name__ == "module"}
    assert set(transports.http.__all__) == public - modules
