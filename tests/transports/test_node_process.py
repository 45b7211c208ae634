"""``reel node`` as a new operator meets it, as a real subprocess on loopback ports: the drain
(listeners up, health draining, new runs refused, progress lines, a second signal stops at once),
``make run`` ending 0 on Ctrl-C, taken ports, ``--help`` and the ready line, and a log where
every line is JSON and no secret appears."""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.health.v1.health_grpc import HealthStub
from grpclib.health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse

from tests.transports.grpc.rawcall import RawCodec, call, methods
from tests.transports.node.test_daemon import REEL, Daemon, assert_one_error_line, reel
from transports.build import version
from transports.config import env_names

PORTS = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
OUTER_MAKE = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")
REPO = Path(__file__).resolve().parents[2]
CORE_KEYS = ("ts", "level", "logger", "msg")
ADMIN_TOKEN_WARNING = (
    "admin.token predates the reel_admin_ prefix, so redaction cannot recognise it if it is "
    "pasted into a message: delete the file and restart for a new one"
)


class ServingNode(Daemon):
    """A ``reel node`` whose stdout is collected too, with helpers for its two APIs."""

    def __init__(self, data: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(data, {**PORTS, **(env or {})})
        self.data = data
        self.stdout: list[str] = []
        self._out = threading.Thread(target=self._read_stdout, daemon=True)
        self._out.start()
        try:
            ready = self.wait_for("reel node ready")
        except BaseException:
            self.close()  # no ready line: the node must not outlive the test
            raise
        self.ready = ready
        self.base = ready["console"].rstrip("/")
        host, _, port = ready["grpc"].rpartition(":")
        self.grpc_host, self.grpc_port = host, int(port)
        self.token = (data / "admin.token").read_text().strip()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.stdout.append(line.rstrip("\n"))

    def finish(self, timeout: float = 30.0) -> int:
        code = super().finish(timeout)
        self._out.join(10)
        return code

    def http(
        self, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any]:
        """Status and decoded JSON body of one request (with the admin token unless given)."""
        request = urllib.request.Request(
            self.base + path,
            data=None if body is None else json.dumps(body).encode(),
            headers={
                "Authorization": f"Bearer {self.token if token is None else token}",
                "Content-Type": "application/json",
            },
            method=method,
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def start_run(self, text: str) -> str:
        status, session = self.http("POST", "/v1/sessions", {})
        assert status == 201, session
        status, started = self.http(
            "POST", f"/v1/sessions/{session['session_id']}/messages", {"text": text}
        )
        assert status == 202, started
        return str(started["run_id"])

    def grpc_health(self) -> int:
        async def check() -> int:
            channel = Channel(self.grpc_host, self.grpc_port)
            try:
                reply = await HealthStub(channel).Check(
                    HealthCheckRequest(service="reel.v1.Gateway"),
                    timeout=10,
                    metadata={"authorization": f"Bearer {self.token}"},
                )
                return int(reply.status)
            finally:
                channel.close()

        return asyncio.run(check())

    def logged(self, message: str) -> list[dict[str, Any]]:
        """Every JSON line on stderr so far whose ``msg`` is ``message``."""
        return [
            record
            for line in list(self.lines)
            if line.startswith("{") and (record := json.loads(line)).get("msg") == message
        ]

    def wait_until(self, predicate: Any, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, self.lines
            time.sleep(0.05)


@pytest.fixture
def nodes() -> Iterator[list[ServingNode]]:
    """Every node a test starts, stopped when it ends."""
    started: list[ServingNode] = []
    yield started
    for node in started:
        node.close()


def start(nodes: list[ServingNode], data: Path, env: dict[str, str] | None = None) -> ServingNode:
    node = ServingNode(data, env)
    nodes.append(node)
    return node


def run_states(node: ServingNode, run_id: str) -> list[str]:
    return [r["state"] for r in node.logged("run state") if r["run_id"] == run_id]


# --- the drain ---------------------------------------------------------------------------------


def test_a_drain_keeps_both_listeners_up_refuses_new_runs_and_shows_progress(
    nodes: list[ServingNode], data_dir: Path
) -> None:
    node = start(nodes, data_dir)
    assert node.http("GET", "/healthz") == (200, {"status": "ok", "version": version()})
    assert node.grpc_health() == HealthCheckResponse.SERVING
    run_id = node.start_run("/sleep 3000\nslow")
    node.wait_until(lambda: "in_progress" in run_states(node, run_id))

    node.process.send_signal(signal.SIGTERM)
    draining = node.wait_for("draining")
    assert draining["signal"] == "SIGTERM"
    assert draining["runs_in_flight"] == 1 and draining["awaiting_approval"] == 0
    # still listening, and saying so
    assert node.http("GET", "/healthz") == (503, {"status": "draining", "version": version()})
    assert node.grpc_health() == HealthCheckResponse.NOT_SERVING
    status, refused = node.http("POST", "/v1/sessions", {})
    assert status == 503 and refused["error"]["code"] == "unavailable"
    assert "shutting down" in refused["error"]["message"]
    progress = node.wait_for("drain progress")
    assert progress["runs_in_flight"] == 1

    assert node.finish() == 0
    assert node.wait_for("drained")["runs_in_flight"] == 0
    # the live run was let finish, not cancelled
    assert run_states(node, run_id)[-1] == "done", node.lines
    done = next(
        r for r in node.logged("run state") if r["run_id"] == run_id and r["state"] == "done"
    )
    assert done["reason"] == "final_answer"
    stopped = node.wait_for("reel node stopped")
    assert stopped["ts"] >= progress["ts"] >= draining["ts"]
    assert reel("journal", "verify", "--data", str(data_dir)).returncode == 0


def test_the_drain_grace_is_configurable_and_cancels_what_outlives_it(
    nodes: list[ServingNode], data_dir: Path
) -> None:
    node = start(nodes, data_dir, {"REEL_RUNS_DRAIN_GRACE_S": "0.5"})
    run_id = node.start_run("/sleep 60000\nforever")
    node.wait_until(lambda: "in_progress" in run_states(node, run_id))
    began = time.monotonic()
    node.process.send_signal(signal.SIGTERM)
    assert node.wait_for("draining")["grace_s"] == 0.5
    assert node.finish(timeout=10) == 0
    # the configured half second, not the default 10 s (a loaded machine took 5.2 s to stop)
    assert time.monotonic() - began < 9
    assert run_states(node, run_id)[-1] == "cancelled", node.lines
    assert reel("journal", "verify", "--data", str(data_dir)).returncode == 0


def test_a_second_signal_stops_at_once_and_the_journal_still_verifies(
    nodes: list[ServingNode], data_dir: Path
) -> None:
    node = start(nodes, data_dir)
    run_id = node.start_run("/sleep 60000\nforever")
    node.wait_until(lambda: "in_progress" in run_states(node, run_id))
    node.process.send_signal(signal.SIGINT)
    assert node.wait_for("draining")["runs_in_flight"] == 1
    began = time.monotonic()
    node.process.send_signal(signal.SIGINT)
    assert node.finish(timeout=10) == 128 + signal.SIGINT
    assert time.monotonic() - began < 5  # not the 10 s grace
    stopping = node.wait_for("stopping at once")
    assert stopping["signal"] == "SIGINT" and stopping["level"] == "warning"
    assert not node.logged("reel node stopped")

    verified = reel("journal", "verify", "--data", str(data_dir), "--json")
    assert verified.returncode == 0, verified
    assert json.loads(verified.stdout)["ok"] is True
    # the next start resolves the run that was cut off
    again = start(nodes, data_dir)
    assert run_id in again.wait_for("recovered after an unclean stop")["interrupted_runs"]
    again.process.send_signal(signal.SIGTERM)
    assert again.finish() == 0


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("setsid") is None, reason="make")
def test_make_run_exits_0_after_a_clean_drain_on_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C on a terminal signals its whole foreground group: make too, which then kills
    itself with SIGINT unless the node took the terminal for itself (transports.node.terminal)."""
    primary, secondary = os.openpty()
    # -o: never reinstall the venv from a test; setsid --ctty: the pty is the controlling
    # terminal of a new session led by make, as a login shell's would be.
    make = subprocess.Popen(
        # BIN: this interpreter's venv, wherever the checkout is (a worktree has no .venv)
        [
            *("setsid", "--ctty", "make", "-o", ".venv/.installed", "run"),
            f"DATA={tmp_path / 'data'}",
            f"BIN={Path(sys.executable).parent}",
        ],
        cwd=REPO,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        # as typed at a terminal, not inside `make test`'s own make (its -j and jobserver flags
        # would reach this make, without the jobserver)
        env={k: v for k, v in os.environ.items() if k not in OUTER_MAKE} | PORTS,
    )
    os.close(secondary)
    output = b""

    def read_until(marker: bytes, timeout: float) -> None:
        nonlocal output
        deadline = time.monotonic() + timeout
        while marker not in output:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    output += os.read(primary, 65536)
                except OSError:  # the terminal's last holder is gone
                    return

    try:
        read_until(b"reel node ready:", 60)
        os.write(primary, b"\x03")  # Ctrl-C, as typed
        read_until(b'"reel node stopped"', 30)
        assert make.wait(30) == 0, output.decode(errors="replace")
    finally:
        if make.poll() is None:
            make.kill()
        os.close(primary)
    text = output.decode(errors="replace")
    assert "Interrupt" not in text and "Error" not in text, text
    assert '"signal": "SIGINT"' in text


# --- ports, help and the ready line -------------------------------------------------------------


@pytest.mark.parametrize("section", ["http", "grpc"])
def test_a_taken_port_is_one_line_naming_the_keys(data_dir: Path, section: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**PORTS, f"REEL_{section.upper()}_PORT": str(port)}
        done = reel("node", "--data", str(data_dir), env=env)
    assert_one_error_line(done, f"127.0.0.1:{port}", f"{section}.host", f"{section}.port")
    assert done.stderr == (
        f"reel: error: cannot listen on 127.0.0.1:{port} (config keys {section}.host, "
        f"{section}.port): Address already in use\n"
    )
    assert "internal error" not in done.stderr


def test_help_names_every_environment_override_and_the_config_file() -> None:
    done = reel("node", "--help")
    assert done.returncode == 0
    words = done.stdout.split()
    for names in env_names().values():
        for name in names:
            assert name in words, name
    for name in ("REEL_DATA", "REEL_CONFIG", "OPENAI_API_KEY"):
        assert name in done.stdout
    text = " ".join(words)
    assert "<data>/config.toml" in text and "runs on embedded defaults" in text


def test_the_ready_line_names_the_config_file_and_provider(
    nodes: list[ServingNode], data_dir: Path, tmp_path: Path
) -> None:
    node = start(nodes, data_dir)
    assert node.ready["config_file"] is None and node.ready["provider"] == "deterministic"
    assert sorted(node.ready["env_overrides"]) == sorted(PORTS)
    node.wait_until(lambda: bool(node.stdout))
    assert "config embedded defaults  provider deterministic" in node.stdout[0]
    node.process.send_signal(signal.SIGTERM)
    assert node.finish() == 0

    elsewhere = tmp_path / "node.toml"
    elsewhere.write_text('[runs]\nmax_turns = 5\n[provider]\nkind = "deterministic"\n')
    node = start(nodes, data_dir, {"REEL_CONFIG": str(elsewhere)})
    assert node.ready["config_file"] == str(elsewhere)
    assert node.ready["config"]["max_turns"] == 5
    node.wait_until(lambda: bool(node.stdout))
    assert f"config {elsewhere}  provider deterministic" in node.stdout[0]
    node.process.send_signal(signal.SIGTERM)
    assert node.finish() == 0


def test_an_admin_token_from_before_the_prefix_is_named_at_start(
    nodes: list[ServingNode], data_dir: Path
) -> None:
    (data_dir / "admin.token").write_text("Q2xk3m9Vb7Yp1Rr4Ss8Tt0Uu6Ww2Xx5Zz3Aa7Bb9Cc\n")
    node = start(nodes, data_dir)
    (warning,) = [r for r in node.logged(ADMIN_TOKEN_WARNING)]
    assert warning["level"] == "warning" and warning["token_file"].endswith("admin.token")
    assert node.http("GET", "/v1/whoami")[0] == 200  # it still works
    node.process.send_signal(signal.SIGTERM)
    assert node.finish() == 0
    fresh = start(nodes, data_dir.parent / "fresh")
    assert not fresh.logged(ADMIN_TOKEN_WARNING)
    fresh.process.send_signal(signal.SIGTERM)
    assert fresh.finish() == 0


# --- the log -----------------------------------------------------------------------------------


class FailingProvider(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that is always overloaded (503): the node retries."""

    authorizations: list[str] = []

    def do_POST(self) -> None:
        self.authorizations.append(self.headers.get("Authorization", ""))
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"error": {"message": "overloaded"}}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def failing_provider() -> Iterator[str]:
    FailingProvider.authorizations = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FailingProvider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_every_log_line_is_json_with_ts_and_no_secret_appears(
    nodes: list[ServingNode], data_dir: Path, failing_provider: str
) -> None:
    api_key = "sk-test-" + "k3y" * 12
    node = start(
        nodes,
        data_dir,
        {
            "REEL_PROVIDER_KIND": "openai",
            "REEL_PROVIDER_BASE_URL": failing_provider,
            "REEL_PROVIDER_MODEL": "m",
            "REEL_PROVIDER_MAX_RETRIES": "2",
            "REEL_TEST_KEY": api_key,
            "REEL_PROVIDER_API_KEY_ENV": "REEL_TEST_KEY",
        },
    )
    assert node.ready["provider"] == "openai" and node.ready["model"] == "m"
    # requests that work, and ones that fail: a wrong token, bad JSON, malformed gRPC
    assert node.http("GET", "/v1/sessions")[0] == 200
    assert node.http("GET", "/v1/sessions", token="not-" + node.token)[0] == 401
    assert node.http("POST", "/v1/sessions", {"label": 7})[0] == 400

    async def malformed() -> None:
        channel = Channel(node.grpc_host, node.grpc_port, codec=RawCodec())
        try:
            metadata = {"authorization": f"Bearer {node.token}"}
            await call(channel, methods()[0], metadata, message=b"\x0a\xff\xff\xff\xff\x0f")
        finally:
            channel.close()

    asyncio.run(malformed())
    # a run whose provider keeps failing: two retries, then the run fails
    run_id = node.start_run("hello")
    node.wait_until(lambda: "failed" in run_states(node, run_id))
    node.process.send_signal(signal.SIGTERM)
    assert node.finish() == 0

    assert FailingProvider.authorizations == [f"Bearer {api_key}"] * 3
    assert node.stdout and all(line.startswith("reel node ready: ") for line in node.stdout)
    assert len(node.lines) >= 8
    for line in node.lines:
        record = json.loads(line)  # every stderr line is one JSON object
        assert list(record)[:4] == list(CORE_KEYS), line
        assert record["ts"].endswith("+00:00"), line
    retries = [
        json.loads(line) for line in node.lines if json.loads(line)["logger"] == "reel.provider"
    ]
    assert [r["retry"] for r in retries] == [1, 2]
    assert all(r["status"] == 503 and r["level"] == "warning" for r in retries)
    loggers = {json.loads(line)["logger"] for line in node.lines}
    assert {"reel.node", "reel.runs", "reel.provider", "reel.grpc"} <= loggers
    for message in ("draining", "drained", "reel node stopped"):
        assert node.logged(message), message
    everything = "\n".join(node.lines + node.stdout)
    assert node.token not in everything and api_key not in everything


def test_library_loggers_tracebacks_and_hpack_under_the_cli_configuration() -> None:
    """What ``reel`` configures for every command (transports.logs.configure), in a fresh
    interpreter: a library's record, a logged exception and a thread that dies are JSON lines
    with the traceback in ``exc``; hpack's DEBUG lines (they carry request headers) are dropped
    even at DEBUG."""
    script = """
import logging, threading, warnings
from actors.log_fields import fields
from transports.logs import configure
configure(logging.DEBUG, library_level=logging.DEBUG)
logging.getLogger("pykka").debug("a library at DEBUG")
logging.getLogger("aiohttp.server").warning("from a library")
logging.getLogger("hpack.hpack").debug("Decoded (b'authorization', b'Bearer s3cret-t0ken')")
logging.getLogger("hpack.table").debug("Adding (b'authorization', b'Bearer s3cret-t0ken')")
try:
    raise ValueError("boom")
except ValueError:
    logging.getLogger("reel.test").exception("failed", extra=fields(run_id="r1", level="x"))
thread = threading.Thread(target=lambda: 1 / 0, name="doomed")
thread.start()
thread.join()
warnings.warn("deprecated thing")
"""
    done = subprocess.run(
        [str(REEL.with_name("python")), "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert [(r["logger"], r["level"]) for r in records] == [
        ("pykka", "debug"),
        ("aiohttp.server", "warning"),
        ("reel.test", "error"),
        ("reel", "error"),
        ("py.warnings", "warning"),
    ]
    assert "s3cret-t0ken" not in done.stderr
    failed, died = records[2], records[3]
    assert failed["msg"] == "failed" and failed["run_id"] == "r1"
    assert failed["level"] == "error"  # a field cannot pass for the record's level
    assert failed["exc"].startswith("Traceback") and "ValueError: boom" in failed["exc"]
    assert "doomed" in died["msg"] and "ZeroDivisionError" in died["exc"]
