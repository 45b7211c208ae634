from __future__ import annotations

import ipaddress
from pathlib import Path

import msgspec
import pytest
from yarl import URL

from tests.tools.conftest import LoopbackServer
from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig
from tools.egress import address_problem
from tools.http_fetch import HttpRuntime

LOOPBACK_ALLOWED: dict[str, object] = {
    "http_allowlist": ("127.0.0.1",),
    "http_allow_private": ("127.0.0.1/32",),
}


def _catalog(**config: object) -> ToolCatalog:
    return ToolCatalog([HttpRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]


def _fetch(workspace: Path, arguments: dict[str, object], **config: object) -> ToolResult:
    catalog = _catalog(**config)
    return catalog.execute(
        "http.fetch",
        catalog.validate("http.fetch", arguments),
        ExecutionContext.start(workspace, 20),
    )


class TestHttpConformance(RuntimeConformance):
    @pytest.fixture(autouse=True)
    def _server(self, http_server: LoopbackServer) -> None:
        self.server = http_server

    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return _catalog(**LOOPBACK_ALLOWED)

    def quick_call(self, workspace: Path) -> Call:
        return ("http.fetch", {"url": f"{self.server.base}/hello"})

    def slow_call(self, workspace: Path) -> Call:
        return ("http.fetch", {"url": f"{self.server.base}/sleep"})


def test_get_from_an_allowed_loopback_server(workspace: Path, http_server: LoopbackServer) -> None:
    result = _fetch(workspace, {"url": f"{http_server.base}/hello?token=abc"}, **LOOPBACK_ALLOWED)
    assert result.ok, result.error
    body = msgspec.json.decode(result.output)
    assert (body["status"], body["body"], body["truncated"]) == (200, "hello", False)
    assert "token" not in body["url"]  # query strings are not echoed back


def test_loopback_is_refused_without_allow_private(
    workspace: Path, http_server: LoopbackServer
) -> None:
    result = _fetch(workspace, {"url": f"{http_server.base}/hello"}, http_allowlist=("127.0.0.1",))
    assert (result.ok, result.error_kind) == (False, "denied")
    assert result.error == "host '127.0.0.1' resolves to 127.0.0.1 (loopback), which is not allowed"


def test_host_not_on_the_allowlist_is_refused(workspace: Path, http_server: LoopbackServer) -> None:
    result = _fetch(workspace, {"url": f"{http_server.base}/hello"})
    assert result.error == "host '127.0.0.1' is not in the http allowlist"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://[::1]:8080/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback, embedded in IPv6"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://224.0.0.1/", "multicast"),
    ],
)
def test_internal_targets_are_refused_even_when_allowlisted(
    workspace: Path, url: str, problem: str
) -> None:
    result = _fetch(workspace, {"url": url}, http_allowlist=(URL(url).host or "",))
    assert (result.ok, result.error_kind) == (False, "denied")
    assert f"({problem})" in (result.error or "")


def test_a_hostname_resolving_to_loopback_is_refused(workspace: Path) -> None:
    result = _fetch(workspace, {"url": "http://localhost:1/"}, http_allowlist=("localhost",))
    assert result.error_kind == "denied"
    assert "resolves to" in (result.error or "") and "loopback" in (result.error or "")


def test_redirect_to_a_disallowed_loopback_address_is_refused(
    workspace: Path, http_server: LoopbackServer
) -> None:
    target = f"http://127.0.0.2:{http_server.port}/hello"
    result = _fetch(
        workspace,
        {"url": f"{http_server.base}/redirect?to={target}"},
        http_allowlist=("127.0.0.1", "127.0.0.2"),
        http_allow_private=("127.0.0.1/32",),
    )
    assert result.error_kind == "denied"
    assert result.error == "host '127.0.0.2' resolves to 127.0.0.2 (loopback), which is not allowed"


def test_redirect_to_metadata_and_unlisted_hosts_is_refused(
    workspace: Path, http_server: LoopbackServer
) -> None:
    meta = _fetch(
        workspace,
        {"url": f"{http_server.base}/redirect?to=http://169.254.169.254/"},
        http_allowlist=("127.0.0.1", "169.254.169.254"),
        http_allow_private=("127.0.0.1",),
    )
    assert "link-local" in (meta.error or "")
    other = _fetch(
        workspace,
        {"url": f"{http_server.base}/redirect?to=http://example.com/"},
        **LOOPBACK_ALLOWED,
    )
    assert other.error == "host 'example.com' is not in the http allowlist"


def test_allowed_redirects_are_followed_up_to_the_limit(
    workspace: Path, http_server: LoopbackServer
) -> None:
    ok = _fetch(workspace, {"url": f"{http_server.base}/redirect?to=/hello"}, **LOOPBACK_ALLOWED)
    body = msgspec.json.decode(ok.output)
    assert (body["body"], body["redirects"]) == ("hello", 1)
    looped = _fetch(
        workspace,
        {"url": f"{http_server.base}/redirect?to=/redirect?to=/hello"},
        http_max_redirects=1,
        **LOOPBACK_ALLOWED,
    )
    assert (looped.error_kind, looped.error) == ("limit", "more than 1 redirects")


def test_response_size_cap_truncates(workspace: Path, http_server: LoopbackServer) -> None:
    result = _fetch(
        workspace,
        {"url": f"{http_server.base}/big"},
        http_response_cap_bytes=1000,
        **LOOPBACK_ALLOWED,
    )
    body = msgspec.json.decode(result.output)
    assert result.ok and result.truncated and body["truncated"]
    assert body["body"] == "x" * 1000


@pytest.mark.timeout(15)
def test_time_cap_stops_a_slow_server(workspace: Path, http_server: LoopbackServer) -> None:
    result = _fetch(
        workspace, {"url": f"{http_server.base}/sleep"}, http_timeout_s=0.5, **LOOPBACK_ALLOWED
    )
    assert (result.ok, result.error_kind) == (False, "timeout")


def test_post_body_and_caller_headers(workspace: Path, http_server: LoopbackServer) -> None:
    posted = _fetch(
        workspace,
        {"url": f"{http_server.base}/echo", "method": "POST", "body": "payload"},
        **LOOPBACK_ALLOWED,
    )
    assert msgspec.json.decode(posted.output)["body"] == "payload"
    seen = _fetch(
        workspace,
        {"url": f"{http_server.base}/headers", "headers": {"X-Probe": "1"}},
        **LOOPBACK_ALLOWED,
    )
    assert msgspec.json.decode(msgspec.json.decode(seen.output)["body"])["X-Probe"] == "1"


def test_bad_requests_are_invalid(workspace: Path, http_server: LoopbackServer) -> None:
    cases: dict[str, dict[str, object]] = {
        "body: only allowed with method POST": {"url": f"{http_server.base}/hello", "body": "x"},
        "headers.Host: may not be set by the caller": {
            "url": f"{http_server.base}/hello",
            "headers": {"Host": "evil"},
        },
        "url: scheme 'file' is not http or https": {"url": "file:///etc/passwd"},
        "url: credentials in the URL are not allowed": {"url": "http://u:p@127.0.0.1/"},
    }
    for message, arguments in cases.items():
        result = _fetch(workspace, arguments, **LOOPBACK_ALLOWED)
        assert (result.error_kind, result.error) == ("invalid", message)


def test_http_errors_fail_but_keep_the_response(
    workspace: Path, http_server: LoopbackServer
) -> None:
    result = _fetch(workspace, {"url": f"{http_server.base}/missing"}, **LOOPBACK_ALLOWED)
    assert (result.ok, result.error_kind, result.error) == (False, "failed", "HTTP 404")
    assert msgspec.json.decode(result.output)["body"] == "nope"


def test_non_utf8_body_is_marked(workspace: Path, http_server: LoopbackServer) -> None:
    result = _fetch(workspace, {"url": f"{http_server.base}/binary"}, **LOOPBACK_ALLOWED)
    assert result.ok and result.lossy
    assert msgspec.json.decode(result.output)["body"] == "ok \ufffd\ufffd"


def test_connection_refused_is_a_failure(workspace: Path) -> None:
    result = _fetch(workspace, {"url": "http://127.0.0.1:1/"}, **LOOPBACK_ALLOWED)
    assert result.error_kind == "failed"
    assert result.error is not None and result.error.startswith("request to '127.0.0.1' failed")


def test_allowlist_wildcards() -> None:
    from tools.egress import EgressPolicy
    from tools.result import ToolFault

    policy = EgressPolicy(["*.example.com", "api.test"], [])
    policy.check_host("a.example.com")
    policy.check_host("API.test.")
    for host in ("example.com", "evilexample.com", "test"):
        with pytest.raises(ToolFault):
            policy.check_host(host)


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "::1",
        "fe80::1",
        "fc00::1",
        "::",
        "ff02::1",
        "::ffff:10.0.0.1",
        "2002:a00:1::1",
    ],
)
def test_internal_addresses_are_classified(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert address_problem(ipaddress.ip_address(address)) is None
