"""Bearer auth on everything but /healthz (and the console's files), size caps, error shape."""

from __future__ import annotations

import json
import logging
import socket
import stat

import pytest

from tests.transports.http.httpkit import MAX_BODY, HttpNode
from tests.transports.records import Records
from transports.build import version
from transports.http.openapi import document

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def operations() -> list[tuple[str, str]]:
    ops = []
    for path, item in document()["paths"].items():
        for method in item:
            concrete = path
            for name in ("session_id", "run_id", "approval_id"):
                concrete = concrete.replace("{" + name + "}", UNKNOWN)
            ops.append((method.upper(), concrete))
    return ops


def test_the_token_file_is_created_private(node: HttpNode) -> None:
    path = node.runtime.data_dir / "admin.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(node.token) >= 32


@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong", "Bearer", "Basic dXNlcjpwYXNz", "Token abc", ""]
)
def test_every_route_but_healthz_refuses_without_the_token(
    node: HttpNode, auth: str | None
) -> None:
    for method, path in operations():
        reply = node.call(method, path, auth=auth)
        if path == "/healthz":
            assert reply.status == 200
            continue
        assert reply.status == 401, (method, path)
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert reply.error["code"] == "unauthenticated"
    assert node.call("GET", "/v1/no-such-route", auth=auth).status == 401


def test_the_scheme_is_case_insensitive_and_the_token_exact(node: HttpNode) -> None:
    assert node.call("GET", "/v1/sessions", auth=f"bearer {node.token}").status == 200
    assert node.call("GET", "/v1/sessions", auth=f"Bearer {node.token}x").status == 401
    assert node.call("GET", "/v1/sessions", auth=f"Bearer {node.token[:-1]}").status == 401


UNDECODABLE = [b"Bearer \xff\xfe", b"Bearer reel_\x80", b"\xc3( x", b"Bearer \xed\xa0\x80"]
"""Authorization values that are not UTF-8: aiohttp hands them on as lone surrogates."""


def raw_status(node: HttpNode, method: str, path: str, authorization: bytes) -> tuple[int, bytes]:
    head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n"
    reply = node.raw(head.encode() + b"Authorization: " + authorization + b"\r\n\r\n")
    status_line, _, body = reply.partition(b"\r\n\r\n")
    return int(status_line.split(b" ")[1]), body


@pytest.mark.parametrize("authorization", UNDECODABLE)
def test_an_undecodable_authorization_is_a_401_on_every_route(
    node: HttpNode, authorization: bytes
) -> None:
    with Records() as log:
        for method, path in [*operations(), ("GET", "/v1/no-such-route"), ("GET", "/nothing")]:
            status, body = raw_status(node, method, path, authorization)
            if path == "/healthz":
                assert status == 200
                continue
            assert status == 401, (method, path, body)
            assert json.loads(body)["error"]["code"] == "unauthenticated"
        assert raw_status(node, "GET", "/app.js", authorization)[0] == 200  # public, as before
    assert not log.faults(), log.text()


def test_unknown_top_level_paths_are_401_without_a_valid_token(node: HttpNode) -> None:
    """The console's catch-all (``/{name}``, ``/static/{path}``) is public for its files only:
    any other path tells a caller without a valid token nothing but 401."""
    for path in ("/nothing", "/v1", "/admin.token", "/.env", "/static/nothing", "/static/a/b"):
        for auth in (None, "Bearer wrong"):
            reply = node.call("GET", path, auth=auth)
            assert (reply.status, reply.error["code"]) == (401, "unauthenticated"), (path, auth)
            assert reply.headers["www-authenticate"].startswith("Bearer")
        found = node.call("GET", path)
        assert (found.status, found.error["code"]) == (404, "not_found"), path
    for path in ("/", "/app.js", "/static/app.css", "/healthz"):  # as documented: public
        assert node.call("GET", path, auth=None).status == 200, path


def test_healthz_needs_no_token(node: HttpNode) -> None:
    reply = node.call("GET", "/healthz", auth=None)
    assert (reply.status, reply.json()) == (200, {"status": "ok", "version": version()})


def test_an_oversize_body_is_413(node: HttpNode) -> None:
    sid = node.session()
    big = {"text": "x" * (MAX_BODY + 1)}
    reply = node.call("POST", f"/v1/sessions/{sid}/messages", big)
    assert reply.status == 413
    assert reply.error["code"] == "payload_too_large"


def test_an_oversize_chunked_body_is_413(node: HttpNode) -> None:
    sid = node.session()
    conn = node.connection()
    try:
        chunks = iter([b'{"text": "', b"x" * MAX_BODY, b'"}'])
        conn.request(
            "POST",
            f"/v1/sessions/{sid}/messages",
            body=chunks,
            headers={"Authorization": f"Bearer {node.token}", "Transfer-Encoding": "chunked"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        assert response.status == 413
        assert b"payload_too_large" in response.read()
    finally:
        conn.close()


def test_unknown_routes_and_methods_are_json(node: HttpNode) -> None:
    missing = node.call("GET", "/v1/nothing/here")
    assert (missing.status, missing.error["code"]) == (404, "not_found")
    wrong = node.call("DELETE", "/v1/sessions")
    assert (wrong.status, wrong.error["code"]) == (405, "method_not_allowed")
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD", "POST"}
    assert wrong.headers["content-type"].startswith("application/json")


def test_the_token_never_reaches_logs_or_bodies(
    node: HttpNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bodies = []
    for auth in ("default", f"Bearer {node.token}x", f"Basic {node.token}"):
        for method, path in operations():
            bodies.append(node.call(method, path, auth=auth).body)
        bodies.append(node.call("POST", "/v1/sessions", raw=b"{bad", auth=auth).body)
    # a request aiohttp cannot parse, with the token on the offending header line
    with socket.create_connection((node.server.host, node.server.port), timeout=10) as raw:
        raw.sendall(
            b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer " + node.token.encode() + b"\x00\r\n\r\n"
        )
        refused = raw.recv(65536)
    assert refused.split(b" ")[1] == b"400"
    assert node.token.encode() not in refused  # aiohttp's own 400 would echo the line
    assert "malformed HTTP request" in caplog.text
    assert node.token not in caplog.text
    assert all(node.token.encode() not in body for body in bodies)
