"""The reference MCP servers published on PyPI, which nobody here wrote (``mcp-server-time``,
``mcp-server-git``, ``mcp-server-fetch``, pinned in tests/tools/mcp/servers/requirements.txt),
run by the node's catalog in the real sandbox: their tools work, their arguments are checked
against the schemas they announce, and what they can reach is what the docs say.

- time: no files and no network needed.
- git: confined by its own ``--repository`` to a scratch repository in the server's own
  writable directory (the only directory a stdio server may write); the node's data dir and
  the host's files are not there to be read.
- fetch: no network of its own; ``http_egress = true`` gives it HTTP(S) through the node's
  egress proxy, which decides every connection by ``[tools] http_allowlist`` and
  ``http_allow_private`` as for ``http.fetch``: a loopback server listed there is fetched, one
  that is not is refused by the node.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.tools.mcp.test_mcp_tools import call, catalog_for, probe_server, venv
from tools import ToolCatalog
from tools.mcp.config import McpServerConfig, McpToolConfig
from tools.sandbox import GUEST_WORKSPACE

pytestmark = pytest.mark.usefixtures("sandbox_required")

NODE_SECRET = "NODE-SECRET-pypi-7c21"


def reference(module: str, *args: str, **config: Any) -> McpServerConfig:
    """A PyPI reference server run as ``python -m module`` from the staged servers' venv (a
    console script's shebang names the venv's original path, which the sandbox does not see)."""
    return McpServerConfig(
        command=str(venv() / "bin" / "python"),
        args=("-m", module, *args),
        read_only_paths=(str(venv()),),
        start_timeout_s=60.0,
        **config,
    )


def text_of(result: Any) -> str:
    assert result.ok, result.error
    return "\n".join(b.get("text", "") for b in json.loads(result.output)["content"])


# --- mcp-server-time ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def time_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolCatalog]:
    data = tmp_path_factory.mktemp("pypi-time")
    tools = {"get_current_time": McpToolConfig(), "convert_time": McpToolConfig()}
    catalog = catalog_for(
        data, time=reference("mcp_server_time", "--local-timezone", "UTC", tools=tools)
    )
    yield catalog
    catalog.close()


def test_the_time_server_converts_a_time(time_server: ToolCatalog) -> None:
    assert time_server.unavailable() == {}
    args = {"source_timezone": "Europe/Paris", "time": "14:30", "target_timezone": "Asia/Tokyo"}
    body = json.loads(text_of(call(time_server, "mcp.time.convert_time", args)))
    assert body["source"]["timezone"] == "Europe/Paris"
    assert body["target"]["timezone"] == "Asia/Tokyo"
    assert body["target"]["datetime"][11:16] in ("21:30", "22:30")  # summer or winter time


def test_the_time_server_says_which_zone_is_unknown(time_server: ToolCatalog) -> None:
    result = call(time_server, "mcp.time.get_current_time", {"timezone": "Mars/Olympus"})
    assert not result.ok and "Mars/Olympus" in (result.error or "")


def test_its_announced_schema_checks_arguments_before_any_call(time_server: ToolCatalog) -> None:
    with pytest.raises(Exception, match="timezone"):
        time_server.validate("mcp.time.get_current_time", {})


# --- mcp-server-git ----------------------------------------------------------------------

GIT_TOOLS = ("git_status", "git_log", "git_add", "git_commit", "git_create_branch", "git_show")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolCatalog, Path]]:
    """A scratch repository with one commit, in the git server's own directory (data/mcp/git,
    which the sandbox shows the server at /workspace), and the node's key beside the data."""
    data = tmp_path_factory.mktemp("pypi-git")
    (data / "node.key").write_text(NODE_SECRET)
    repo = data / "mcp" / "git" / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Scratch")
    git(repo, "config", "user.email", "scratch@example.invalid")
    (repo / "README").write_text("scratch\n")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "seed the scratch repository")
    guest = f"{GUEST_WORKSPACE}/repo"
    server = reference(
        "mcp_server_git",
        "--repository",
        guest,
        tools={name: McpToolConfig() for name in GIT_TOOLS},
    )
    catalog = catalog_for(data, git=server)
    yield catalog, repo
    catalog.close()


def test_the_git_server_reads_and_commits_in_its_scratch_repository(
    git_server: tuple[ToolCatalog, Path],
) -> None:
    catalog, repo = git_server
    guest = f"{GUEST_WORKSPACE}/repo"
    assert catalog.unavailable() == {}
    log = text_of(call(catalog, "mcp.git.git_log", {"repo_path": guest}))
    assert "seed the scratch repository" in log
    (repo / "notes.txt").write_text("written by the test\n")
    (repo / "notes.txt").chmod(0o666)
    status = text_of(call(catalog, "mcp.git.git_status", {"repo_path": guest}))
    assert "notes.txt" in status
    assert call(catalog, "mcp.git.git_add", {"repo_path": guest, "files": ["notes.txt"]}).ok
    message = "a commit made through reel"
    assert call(catalog, "mcp.git.git_commit", {"repo_path": guest, "message": message}).ok
    assert git(repo, "log", "-1", "--format=%s").strip() == message
    assert git(repo, "show", "HEAD:notes.txt") == "written by the test\n"


def test_the_git_server_is_held_to_its_repository(git_server: tuple[ToolCatalog, Path]) -> None:
    catalog, _ = git_server
    outside = call(catalog, "mcp.git.git_status", {"repo_path": "/"})
    assert not outside.ok and "outside the allowed repository" in (outside.error or "")
    up = call(
        catalog, "mcp.git.git_add", {"repo_path": f"{GUEST_WORKSPACE}/repo", "files": ["../../x"]}
    )
    assert not up.ok


def test_an_unconfined_git_server_still_cannot_reach_the_data_dir(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The same server without ``--repository`` goes wherever a call's ``repo_path`` says. The
    node's data dir here is itself a repository with the node's key committed: outside the
    sandbox a ``git_show`` of it would print the key; inside, the directory is not there."""
    data = tmp_path_factory.mktemp("pypi-git-free")
    (data / "node.key").write_text(NODE_SECRET)
    git(data, "init", "-q", "-b", "main")
    git(data, "add", "node.key")
    git(data, "-c", "user.name=n", "-c", "user.email=n@example.invalid", "commit", "-q", "-m", "k")
    assert NODE_SECRET in git(data, "show", "HEAD")
    catalog = catalog_for(
        data, free=reference("mcp_server_git", tools={"git_show": McpToolConfig()})
    )
    try:
        for path in (str(data), f"{GUEST_WORKSPACE}/../..{data}"):
            result = call(catalog, "mcp.free.git_show", {"repo_path": path, "revision": "HEAD"})
            assert not result.ok and data.name in (result.error or "")  # it looked: no such path
            assert NODE_SECRET not in (result.error or "") + (result.output or "")
    finally:
        catalog.close()


# --- mcp-server-fetch, through the node's egress proxy -------------------------------------

PAGE = "<html><body><h1>Loopback page</h1><p>MARKER-fetch-91d3 in a paragraph.</p></body></html>"


class Site(http.server.ThreadingHTTPServer):
    """A loopback web site that remembers which paths were asked for."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        super().__init__(("127.0.0.1", 0), SiteHandler)


class SiteHandler(http.server.BaseHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:
        self.server.seen.append(self.path)
        body = b"User-agent: *\nAllow: /\n" if self.path == "/robots.txt" else PAGE.encode()
        kind = "text/plain" if self.path == "/robots.txt" else "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    server = Site()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def fetch_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ToolCatalog]:
    """The fetch server with the node's proxy as its only way out; the node allows 127.0.0.1
    (and its loopback address), nothing else. The server's own private-address guard is off
    (``--allow-private-ips``) so that what is refused is refused by the node."""
    data = tmp_path_factory.mktemp("pypi-fetch")
    server = reference(
        "mcp_server_fetch",
        "--allow-private-ips",
        http_egress=True,
        tools={"fetch": McpToolConfig()},
    )
    catalog = catalog_for(data, ("127.0.0.1",), ("127.0.0.1",), fetch=server)
    yield catalog
    catalog.close()


def test_the_fetch_server_reaches_a_listed_loopback_site(
    fetch_server: ToolCatalog, site: Site
) -> None:
    assert fetch_server.unavailable() == {}
    assert "net.egress" in fetch_server.spec("mcp.fetch.fetch").capabilities
    url = f"http://127.0.0.1:{site.server_address[1]}/page"
    assert "MARKER-fetch-91d3" in text_of(call(fetch_server, "mcp.fetch.fetch", {"url": url}))
    assert "/page" in site.seen and "/robots.txt" in site.seen


@pytest.mark.parametrize("host", ["localhost", "0.0.0.0"])
def test_the_node_refuses_a_host_it_does_not_list(
    fetch_server: ToolCatalog, site: Site, host: str
) -> None:
    """The same site by a name or address the allowlist does not hold: the request never
    arrives (from the host, both reach the very same listening socket)."""
    path = f"/unlisted-{host}"
    url = f"http://{host}:{site.server_address[1]}{path}"
    result = call(fetch_server, "mcp.fetch.fetch", {"url": url})
    assert not result.ok and "403" in (result.error or ""), result.error
    assert path not in site.seen


def test_an_http_egress_server_has_no_direct_way_out(
    tmp_path_factory: pytest.TempPathFactory, site: Site
) -> None:
    """Our probe server with ``http_egress``: the proxy variables point into the sandbox, and
    a direct connection to the listed site (ignoring them) finds nothing there."""
    data = tmp_path_factory.mktemp("pypi-egress-probe")
    probe = msgspec.structs.replace(
        probe_server(snoop=McpToolConfig()), http_egress=True, start_timeout_s=60.0
    )
    catalog = catalog_for(data, ("127.0.0.1",), ("127.0.0.1",), probe=probe)
    try:
        args = {"path": "/etc/hostname", "host": "127.0.0.1", "port": site.server_address[1]}
        result = call(catalog, "mcp.probe.snoop", args)
        body = json.loads(result.output)["structured"]
        assert "HTTP_PROXY" in body["env"].split(",")
        assert body["connect"].startswith("refused")
        assert not site.seen or all(p.startswith(("/page", "/robots")) for p in site.seen)
    finally:
        catalog.close()
