"""Schemathesis against /v1/openapi.json on a live node: no 5xx, no hang, conformant replies.

Bounded: a few examples per operation, a request time-out and an overall time budget. The
check ``positive_data_acceptance`` is left out on purpose: schema-valid input that the node's
rules refuse (a branch point that is not in the session's history, a whitespace-only message)
is a correct 400, not an API fault.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.transports.http.httpkit import HttpNode
from tests.transports.records import Records

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


@pytest.mark.skipif(
    not SCHEMATHESIS.exists() and shutil.which("schemathesis") is None,
    reason="schemathesis is not installed (dev extra)",
)
def test_fuzz_the_api_with_schemathesis(node: HttpNode, tmp_path: Path, records: Records) -> None:
    command = str(SCHEMATHESIS) if SCHEMATHESIS.exists() else "schemathesis"
    # A body over http.max_body_bytes (4 KiB here) is refused with a 413 before it is read: that
    # is a rejection too (an invalid 8,000-character memory text is larger than the limit).
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        "[checks.negative_data_rejection]\n"
        "expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]\n"
    )
    done = subprocess.run(
        [
            command,
            "--config-file",
            str(config),
            "run",
            f"{node.server.url}/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {node.token}",
            "--checks",
            "all",
            "--exclude-checks",
            "positive_data_acceptance",
            "--phases",
            "coverage,fuzzing,stateful",
            "--max-examples",
            "12",
            "--max-time",
            "25",
            "--request-timeout",
            "10",
            "--seed",
            "20260",
            # One worker: schemathesis compiles code in its coverage phase, and CPython 3.11
            # sometimes fails compiling from two threads at once ("AST constructor recursion
            # depth mismatch"), an error in the fuzzer, not in the API under test.
            "--workers",
            "1",
            "--report-dir",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    output = done.stdout + done.stderr
    assert "Server error" not in output, output[-6000:]
    assert done.returncode == 0, output[-6000:]
    assert node.token not in output
    # the node is still healthy afterwards, and logged no traceback and no token
    assert node.call("GET", "/healthz", auth=None).status == 200
    assert not records.faults(), records.text()
    assert node.token not in records.text()


# --- hypothesis: bodies and header lines ---------------------------------------------------------

EXAMPLES = int(os.environ.get("REEL_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
FIELDS = [
    "text",
    "label",
    "session_key",
    "run_id",
    "tool",
    "posture",
    "decision",
    "scope",
    "reason",
]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CONTENT_TYPES = st.sampled_from(
    [None, "application/json", "text/plain", "application/json; charset=latin-1", "x/y+json"]
)


def json_bytes(value: object) -> bytes:
    return json.dumps(value).encode()


def with_bad_bytes(pair: tuple[bytes, int, bytes]) -> bytes:
    body, at, bad = pair
    at %= len(body) + 1
    return body[:at] + bad + body[at:]


BODIES = st.one_of(
    st.binary(max_size=120),
    JSON.map(json_bytes),
    st.tuples(
        JSON.map(json_bytes),
        st.integers(0, 1 << 12),
        st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xf8\x88\x80\x80\x80"]),
    ).map(with_bad_bytes),
)


@pytest.fixture
def records() -> Iterator[Records]:
    with Records() as log:
        yield log


def post_routes(node: HttpNode) -> list[str]:
    sid = node.session()
    run_id = node.start("hello")
    node.finish(run_id)
    return [
        "/v1/sessions",
        f"/v1/sessions/{sid}/messages",
        f"/v1/sessions/{sid}/reset",
        f"/v1/sessions/{sid}/branch",
        f"/v1/sessions/{sid}/postures",
        f"/v1/runs/{run_id}/cancel",
        f"/v1/approvals/{UNKNOWN}",
        "/v1/journal/verify",
    ]


def test_fuzzed_bodies_to_every_post_route(node: HttpNode, records: Records) -> None:
    routes = post_routes(node)

    @FUZZ
    @given(route=st.sampled_from(routes), body=BODIES, content_type=CONTENT_TYPES)
    def fuzz(route: str, body: bytes, content_type: str | None) -> None:
        headers = {} if content_type is None else {"Content-Type": content_type}
        reply = node.call("POST", route, raw=body, headers=headers)
        assert reply.status < 500, (route, body, reply)
        if reply.status >= 400:
            assert reply.error["code"], reply
        assert node.token.encode() not in reply.body

    fuzz()
    assert not records.faults(), records.text()


HEADER_BYTES = st.binary(min_size=1, max_size=40).filter(lambda b: b"\r\n" not in b)
CANARY = b"zq7-canary-3kx"
"""Inside every fuzzed header value: an echo of the value shows as this text in the body. (The
value itself can be one byte, a space say, which any error message holds.)"""


def test_fuzzed_header_lines_never_echo_the_request(node: HttpNode, records: Records) -> None:
    token = node.token.encode()

    @FUZZ
    @given(name=HEADER_BYTES, left=HEADER_BYTES, right=HEADER_BYTES, before=st.booleans())
    def fuzz(name: bytes, left: bytes, right: bytes, before: bool) -> None:
        auth = b"Authorization: Bearer " + token + b"\r\n"
        odd = name + b": " + left + CANARY + right + b"\r\n"
        raw = node.raw(
            b"GET /v1/sessions?limit=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + (odd + auth if before else auth + odd)
            + b"\r\n"
        )
        status = int(raw.split(b" ", 2)[1])
        assert status < 500, raw
        body = raw.partition(b"\r\n\r\n")[2]
        if status >= 400:
            assert token not in raw and CANARY not in body, raw

    fuzz()
    assert not records.faults(), records.text()
    assert node.token not in records.text()
