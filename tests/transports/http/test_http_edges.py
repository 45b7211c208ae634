"""Malformed input at the HTTP edge: a 4xx with the JSON error naming the field (or the request),
never a 5xx, never a traceback in the log, never an echo of the request's bytes."""

from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import pytest

from tests.transports.http.httpkit import MAX_BODY, HttpNode, HttpReply, close_node, open_node
from transports.http.inputs import not_utf8

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def quiet(log: pytest.LogCaptureFixture, node: HttpNode) -> None:
    """Nothing a client sent produced a traceback, an error record or the token in the log."""
    assert not [r for r in log.records if r.exc_info], log.text
    assert "Traceback" not in log.text
    assert not [r for r in log.records if r.levelno >= logging.ERROR], log.text
    assert node.token not in log.text


def response(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(" ")[1]), headers, body


def send_body(node: HttpNode, path: str, body: bytes, **headers: str) -> HttpReply:
    return node.call("POST", path, raw=body, headers=headers)


# --- invalid UTF-8 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "says"),
    [
        (b'{"text": "hello \xff world"}', "$.text", "the string at $.text"),
        (b'{"text": "ok", "label": "\xc3"}', "$.label", "the string at $.label"),
        (b'{"te\xe9xt": "ok"}', "$", "a key of the object at $"),
        (b'{"text": "an encoded surrogate \xed\xa0\x80"}', "$.text", "$.text"),
    ],
)
def test_invalid_utf8_in_a_json_string_is_400_naming_the_field(
    node: HttpNode, log: pytest.LogCaptureFixture, body: bytes, field: str, says: str
) -> None:
    sid = node.session()
    reply = send_body(node, f"/v1/sessions/{sid}/messages", body)
    assert reply.status == 400, reply
    assert reply.error["code"] == "invalid_argument"
    assert reply.error["field"] == field
    assert says in reply.error["message"]
    assert "UTF-8" in reply.error["message"]
    quiet(log, node)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b'{"a": ["x", {"b": "\xff"}]}', "$.a[1].b"),
        (b'{"a": {"\xff": 1}}', "$.a"),
        (b'[[[["\xc0\xaf"]]]]', "$[0][0][0][0]"),
        (b'"\xf8\x88\x80\x80\x80"', "$"),
        (b'{"a": "\xff"' + b"[" * 100_000, "$"),
    ],
)
def test_the_path_of_the_string_holding_bad_bytes(body: bytes, field: str) -> None:
    assert not_utf8(body).field == field
    assert b"\xff".decode("latin-1") not in not_utf8(body).message


@pytest.mark.parametrize(
    "body", [b"\xff\xfe{}", b'{"text": "a"\xff}', b"\x80", b'{"text": "\xff"' + b"[" * 3000]
)
def test_a_body_that_is_not_utf8_json_is_400_naming_the_body(
    node: HttpNode, log: pytest.LogCaptureFixture, body: bytes
) -> None:
    sid = node.session()
    reply = send_body(node, f"/v1/sessions/{sid}/messages", body)
    assert (reply.status, reply.error["code"], reply.error["field"]) == (
        400,
        "invalid_argument",
        "$",
    )
    quiet(log, node)


def test_every_route_with_a_body_refuses_invalid_utf8_alike(
    node: HttpNode, log: pytest.LogCaptureFixture
) -> None:
    sid = node.session()
    for path in (
        "/v1/sessions",
        f"/v1/sessions/{sid}/messages",
        f"/v1/sessions/{sid}/reset",
        f"/v1/sessions/{sid}/branch",
        f"/v1/sessions/{sid}/postures",
        f"/v1/approvals/{UNKNOWN}",
        f"/v1/runs/{UNKNOWN}/cancel",
        "/v1/journal/verify",
    ):
        reply = send_body(node, path, b'{"label": "\xff"}')
        assert reply.status == 400, (path, reply)
        assert reply.error["field"] in ("$.label", "$"), (path, reply.error)
    quiet(log, node)


# --- content types and shapes ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16"],
)
def test_a_body_that_is_not_declared_utf8_json_is_400_naming_the_header(
    node: HttpNode, content_type: str
) -> None:
    reply = send_body(node, "/v1/sessions", b"{}", **{"Content-Type": content_type})
    assert (reply.status, reply.error["field"]) == (400, "header.Content-Type"), reply


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=UTF-8", "application/x+json"]
)
def test_json_content_types_are_accepted(node: HttpNode, content_type: str) -> None:
    reply = send_body(node, "/v1/sessions", b"{}", **{"Content-Type": content_type})
    assert reply.status == 201, reply


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"[]", "$"),
        (b'"text"', "$"),
        (b"null", "$"),
        (b"17", "$"),
        (b'{"text": 5}', "$.text"),
        (b'{"text": "a", "extra": 1}', "$.extra"),
        (b'{"text": "a"} trailing', "$"),
        (b'{"text": "\\ud800"}', "$"),
        (b'{"text": "   "}', "$.text"),
    ],
)
def test_json_of_the_wrong_shape_is_400_naming_the_field(
    node: HttpNode, log: pytest.LogCaptureFixture, body: bytes, field: str
) -> None:
    sid = node.session()
    reply = send_body(node, f"/v1/sessions/{sid}/messages", body)
    assert (reply.status, reply.error["field"]) == (400, field), reply
    quiet(log, node)


# --- what aiohttp refuses before any handler ---------------------------------------------------


@pytest.mark.parametrize(
    "header_line",
    [
        b"Authorization: Bearer {token}\x00",
        b"Authorization: Bearer {token}\x7f",
        b"X-Note: a\x00Authorization: Bearer {token}",
        b"Authorization Bearer {token}",
        b"Authorization: Bearer {token}\r\n bad-fold",
        b"Auth\x01orization: Bearer {token}",
    ],
)
def test_a_malformed_header_line_is_refused_without_echoing_the_request(
    node: HttpNode, log: pytest.LogCaptureFixture, header_line: bytes
) -> None:
    token = node.token.encode()
    raw = node.raw(
        b"GET /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + header_line.replace(b"{token}", token)
        + b"\r\n\r\n"
    )
    status, headers, body = response(raw)
    assert status == 400
    assert token not in raw
    assert b"Authorization" not in body and b"Bearer" not in body
    assert headers["content-type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_argument"
    assert "not valid HTTP/1.1" in error["message"]
    assert "malformed HTTP request" in log.text
    quiet(log, node)


@pytest.mark.parametrize(
    "request_line",
    [
        b"GET /v1/sessions?token={token} HTTP/9.9",
        b"G\x00T /v1/sessions HTTP/1.1",
        b"GET /v1/sessions/{token}\x00 HTTP/1.1",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1",
    ],
)
def test_a_malformed_request_line_is_refused_without_echoing_it(
    node: HttpNode, log: pytest.LogCaptureFixture, request_line: bytes
) -> None:
    token = node.token.encode()
    raw = node.raw(request_line.replace(b"{token}", token) + b"\r\nHost: x\r\n\r\n")
    status, _, body = response(raw)
    assert status == 400
    assert token not in raw and b"/v1/sessions" not in body
    quiet(log, node)


def test_a_malformed_chunked_body_is_400_without_echo(
    node: HttpNode, log: pytest.LogCaptureFixture
) -> None:
    raw = node.raw(
        b"POST /v1/sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + node.token.encode() + b"\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz-secret-chunk\r\n{}\r\n0\r\n\r\n"
    )
    status, _, body = response(raw)
    assert status == 400
    assert b"secret-chunk" not in raw
    assert json.loads(body)["error"]["code"] == "invalid_argument"
    quiet(log, node)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_body_that_does_not_decompress_is_400(
    node: HttpNode, log: pytest.LogCaptureFixture, encoding: str
) -> None:
    reply = send_body(
        node, "/v1/sessions", b"not compressed at all", **{"Content-Encoding": encoding}
    )
    assert (reply.status, reply.error["code"]) == (400, "invalid_argument"), reply
    # an encoding aiohttp cannot decode at all (br without brotli) is refused with the headers
    assert reply.error["field"] == "$" or "ContentEncodingError" in reply.error["message"]
    quiet(log, node)


def test_a_compressed_body_that_decompresses_is_accepted(node: HttpNode) -> None:
    reply = send_body(
        node,
        "/v1/sessions",
        zlib.compress(b'{"label": "zipped"}'),
        **{"Content-Encoding": "deflate"},
    )
    assert reply.status == 201, reply
    assert reply.json()["label"] == "zipped"


def test_a_compressed_body_over_the_limit_once_inflated_is_413(node: HttpNode) -> None:
    bomb = zlib.compress(b'{"label": "' + b"x" * (MAX_BODY * 50) + b'"}')
    assert len(bomb) < MAX_BODY
    reply = send_body(node, "/v1/sessions", bomb, **{"Content-Encoding": "deflate"})
    assert (reply.status, reply.error["code"]) == (413, "payload_too_large"), reply


# --- paths, queries, headers -------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/sessions/%ff%fe",
        "/v1/sessions/%00",
        "/v1/runs/" + "7" * 26,
        "/v1/runs/" + UNKNOWN.lower(),
        "/v1/approvals/" + "x" * 5000,
        "/v1/runs/..%2f..%2fadmin.token",
    ],
)
def test_bad_path_ids_are_404(node: HttpNode, log: pytest.LogCaptureFixture, path: str) -> None:
    reply = node.call("GET", path)
    assert (reply.status, reply.error["code"]) == (404, "not_found"), reply
    assert len(reply.body) < 400
    quiet(log, node)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?limit=%ff", "query.limit"),
        ("?limit=1e3", "query.limit"),
        ("?limit=99999999999999999999999", "query.limit"),
        ("?limit=-1", "query.limit"),
        ("?after=%00", "query.after"),
        ("?after=", "query.after"),
    ],
)
def test_bad_query_parameters_are_400_naming_them(
    node: HttpNode, log: pytest.LogCaptureFixture, query: str, field: str
) -> None:
    reply = node.call("GET", "/v1/sessions" + query)
    assert (reply.status, reply.error["field"]) == (400, field), reply
    quiet(log, node)


def test_a_last_event_id_that_is_not_utf8_is_400(
    node: HttpNode, log: pytest.LogCaptureFixture
) -> None:
    run_id = node.start("hello")
    raw = node.raw(
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Authorization: Bearer {node.token}\r\n".encode()
        + b"Last-Event-ID: \xff\xfe\r\n\r\n"
    )
    status, _, body = response(raw)
    assert status == 400
    assert json.loads(body)["error"]["field"] == "header.Last-Event-ID"
    quiet(log, node)


# --- tool arguments ----------------------------------------------------------------------------


def test_a_fetch_header_with_crlf_is_a_tool_error_naming_it_not_an_internal_error(
    data_dir: Path, log: pytest.LogCaptureFixture
) -> None:
    node = open_node(data_dir, keepalive_s=0.3, fetch=("127.0.0.1",))  # the host is allowed
    try:
        arguments = json.dumps(
            {"url": "http://127.0.0.1:9/", "headers": {"X-Note": "a\r\nX-Injected: b\u0000"}}
        )
        run_id = node.start(f"/tool http.fetch {arguments}")
        events = node.finish(run_id)  # refused before a human is asked (the precheck)
        assert "tool.approval_requested" not in [e.event for e in events]
        completed = next(e.entry["event"] for e in events if e.event == "tool.completed")
        assert (completed["ok"], completed["error_kind"]) == (False, "denied")
        assert "headers.X-Note: the value has a carriage return (CR)" in completed["error"]
        assert events[-1].event == "run.completed"
        quiet(log, node)
    finally:
        close_node(node)


# --- identifiers the journal stores in clear ----------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "a b",
        "x" * 200,
        "-leading",
        "key\u00e9",
        "ghp_" + "A1b2" * 9,
        "AKIAIOSFODNN7EXAMPLE",
        "reel_01KAZQ5W3J8D4M2N6P0R7T9V1X_"
        + "q8Zk-2LmNpQ4rS7t" * 2
        + "U1vW3xY5zA6",  # reel's own API token
        "reel_admin_" + "Xy9_kL2mNpQ4-rS7" * 2 + "tU1vW3xY5zA",  # and its admin token
    ],
)
def test_a_session_key_the_journal_would_refuse_is_400_at_once(
    node: HttpNode, log: pytest.LogCaptureFixture, key: str
) -> None:
    sid = node.session()
    for path in ("/v1/sessions", f"/v1/sessions/{sid}/branch"):
        reply = node.call("POST", path, {"session_key": key})
        assert (reply.status, reply.error["field"]) == (400, "$.session_key"), reply
        assert key not in reply.body.decode()
    assert node.call("POST", "/v1/sessions", {"session_key": "fine:key/1"}).status == 201
    quiet(log, node)


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/sessions?limt=5", "query.limt"),
        ("/v1/sessions?limit=1&limit=2", "query.limit"),
        ("/v1/approvals?state=pending&State=pending", "query.State"),
        (f"/v1/runs/{UNKNOWN}?after=1", "query.after"),
        ("/v1/journal/head?verbose=1", "query.verbose"),
        ("/metrics?debug", "query.debug"),
    ],
)
def test_query_parameters_an_operation_does_not_take_are_400(
    node: HttpNode, path: str, field: str
) -> None:
    reply = node.call("GET", path)
    assert (reply.status, reply.error["field"]) == (400, field), reply


def test_the_query_parameters_an_operation_takes_are_accepted(node: HttpNode) -> None:
    assert node.call("GET", "/v1/sessions?limit=5&after=" + UNKNOWN).status == 200
    assert node.call("GET", "/v1/approvals?state=pending&limit=1").status == 200
    assert node.call("GET", "/healthz?probe=1", auth=None).status == 200
