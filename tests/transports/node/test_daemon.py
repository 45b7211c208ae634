"""``reel node`` as a real subprocess: ready line, signals, config errors, the writer lock, and
the run-state log lines (RunStateLogger against a real journal and node)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from actors.messages import ResolveApproval, StartRun
from events import Journal, NodeKey, new_id
from events.catalog import RunAccepted, SessionCreated
from tests import processes
from transports.build import version
from transports.config import NodeConfig, ToolsSection
from transports.node.runlog import RunStateLogger
from transports.runtime import open_runtime

REEL = Path(sys.executable).with_name("reel")


EPHEMERAL = {"REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
"""Free ports: the shipped 8470/8471 may be another test's (another xdist worker's)."""


class Daemon:
    """A running ``reel node``; stderr is collected line by line on a thread."""

    def __init__(self, data: Path, env: dict[str, str] | None = None) -> None:
        self._stop = ExitStack()
        self.process: subprocess.Popen[str] = self._stop.enter_context(
            processes.node(
                "--data",
                data,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, **EPHEMERAL, **(env or {})},
            )
        )
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def wait_for(self, message: str, timeout: float = 30.0) -> dict[str, Any]:
        """The first JSON log line whose ``msg`` is ``message``."""
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                for line in self.lines:
                    if line.startswith("{") and json.loads(line).get("msg") == message:
                        return json.loads(line)  # type: ignore[no-any-return]
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no {message!r} line; stderr so far: {self.lines}")
                self._new.wait(min(left, 0.2))

    def finish(self, timeout: float = 30.0) -> int:
        code = self.process.wait(timeout)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def close(self) -> None:
        """Stop the node if it still runs (:func:`tests.processes.spawned`)."""
        self._stop.close()


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    """Every node a test starts, stopped when it ends."""
    started: list[Daemon] = []
    yield started
    for daemon in started:
        daemon.close()


def start(daemons: list[Daemon], data: Path, env: dict[str, str] | None = None) -> Daemon:
    daemon = Daemon(data, env)
    daemons.append(daemon)
    return daemon


def reel(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [str(REEL), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


def assert_one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("reel: error: ") and "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_node_starts_and_stops_cleanly_on_a_signal(
    daemons: list[Daemon], data_dir: Path, signum: signal.Signals
) -> None:
    daemon = start(daemons, data_dir)
    ready = daemon.wait_for("reel node ready")
    assert ready["pid"] == daemon.process.pid
    assert ready["data_dir"] == str(data_dir)
    assert ready["provider"] == "deterministic"
    assert ready["config"]["max_turns"] == 16
    assert ready["version"] == version()
    assert (data_dir / "journal.db").exists() and (data_dir / "node.key").exists()
    daemon.process.send_signal(signum)
    assert daemon.finish() == 0
    assert daemon.process.stdout is not None
    printed = daemon.process.stdout.read()
    assert printed.startswith(f"reel node ready: version {version()}  console "), printed
    assert daemon.wait_for("draining")["signal"] == signum.name
    stopped = daemon.wait_for("reel node stopped")
    assert stopped["head"] >= 0
    assert not any("Traceback" in line for line in daemon.lines)
    # the data dir is free again and the journal verifies (the final checkpoint is signed)
    done = reel("journal", "verify", "--data", str(data_dir))
    assert done.returncode == 0, done


def test_a_secret_in_the_config_never_reaches_the_log(
    daemons: list[Daemon], data_dir: Path
) -> None:
    """The ready line logs the runs settings: a key pasted into the system prompt was written
    in clear. Every log line goes through redaction (transports/logs.py)."""
    secret = "sk-proj-" + "Zq3vT9wLm2Xc8RbN5yHk" * 2
    env = {"REEL_RUNS_SYSTEM_PROMPT": f"You help. Our OpenAI key is {secret}"}
    daemon = start(daemons, data_dir, env)
    ready = daemon.wait_for("reel node ready")
    assert ready["config"]["system_prompt"] == "You help. Our OpenAI key is [REDACTED]"
    assert ready["pid"] == daemon.process.pid  # identifiers are written as they are
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.finish() == 0
    assert not any(secret in line for line in daemon.lines)


def test_an_unknown_config_key_is_named(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text("[runs]\nmax_turnz = 3\n")
    assert_one_error_line(reel("node", "--data", str(data_dir)), "runs.max_turnz", "unknown key")


def test_an_unknown_environment_override_is_named(data_dir: Path) -> None:
    done = reel("node", "--data", str(data_dir), env={"REEL_RUNS_MAX_TURNZ": "3"})
    assert_one_error_line(done, "REEL_RUNS_MAX_TURNZ", "runs.max_turnz")


def test_a_bad_config_value_is_named(data_dir: Path) -> None:
    (data_dir / "config.toml").write_text('[runs]\nmax_turns = "many"\n')
    assert_one_error_line(reel("node", "--data", str(data_dir)), "runs.max_turns")


def test_environment_overrides_reach_the_node(daemons: list[Daemon], data_dir: Path) -> None:
    daemon = start(daemons, data_dir, env={"REEL_RUNS_MAX_TURNS": "3"})
    assert daemon.wait_for("reel node ready")["config"]["max_turns"] == 3
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.finish() == 0


def test_the_configured_workspace_is_where_tools_and_references_work(
    data_dir: Path, tmp_path: Path
) -> None:
    """``[tools] workspace_dir`` (here ``REEL_TOOLS_WORKSPACE_DIR``) is the one workspace: a
    tool writes there and an ``@file`` reference reads from there, not ``<data>/workspace``."""
    elsewhere = tmp_path / "ws"
    env = {"REEL_TOOLS_WORKSPACE_DIR": str(elsewhere)}
    call = '/tool fs.write {"path": "note.txt", "content": "kept elsewhere"}'
    wrote = reel("chat", "--local", "--new", "--approve", call, "--data", str(data_dir), env=env)
    assert wrote.returncode == 0, wrote.stderr
    assert (elsewhere / "note.txt").read_text() == "kept elsewhere"
    assert not (data_dir / "workspace" / "note.txt").exists()
    read = reel(
        "chat", "--local", "--new", "--approve", "what does @file:note.txt say?",
        "--data", str(data_dir), env=env,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert "kept elsewhere" in read.stdout and "does not exist" not in read.stdout


def test_a_second_node_on_the_same_data_dir_names_the_holder(
    daemons: list[Daemon], data_dir: Path
) -> None:
    first = start(daemons, data_dir)
    first.wait_for("reel node ready")
    done = reel("node", "--data", str(data_dir))
    assert_one_error_line(done, str(first.process.pid))
    first.process.send_signal(signal.SIGTERM)
    assert first.finish() == 0


def test_a_restart_after_a_crash_logs_the_interrupted_runs(
    daemons: list[Daemon], data_dir: Path
) -> None:
    session_id, run_id = new_id(), new_id()
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(data_dir / "journal.db", node_key=key) as journal:
        stream = f"session/{session_id}"
        journal.append(stream, [SessionCreated(session_id=session_id)], expected_seq=0)
        journal.append(
            stream,
            [RunAccepted(run_id=run_id, session_id=session_id, text="lost")],
            expected_seq=1,
            correlation_id=run_id,
        )
    daemon = start(daemons, data_dir)
    recovered = daemon.wait_for("recovered after an unclean stop")
    assert recovered["interrupted_runs"] == [run_id]
    daemon.wait_for("reel node ready")
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.finish() == 0


def test_one_log_line_per_run_state_change(data_dir: Path) -> None:
    config = NodeConfig(tools=ToolsSection(shell_allowlist=("echo",)))
    runtime = open_runtime(data_dir, config=config)
    lines: list[dict[str, Any]] = []
    logger = RunStateLogger(runtime.journal, lines.append)
    logger.start()
    try:
        node = runtime.node
        ticket = node.ask(StartRun(text='go\n/tool shell.run {"argv": ["echo", "x"]}', create=True))
        deadline = time.monotonic() + 10
        approval_id = None
        while approval_id is None:
            assert time.monotonic() < deadline, lines
            for stored in runtime.journal.read_correlated(ticket.run_id):
                if stored.kind == "run.awaiting_approval":
                    approval_id = stored.decode().approval_id  # type: ignore[attr-defined]
            time.sleep(0.02)
        while runtime.node.services.registry.approval(approval_id) is None:
            time.sleep(0.01)
        node.ask(ResolveApproval(approval_id=approval_id, decision="allow"))
        failed = node.ask(StartRun(text="/fail nope", session_id=ticket.session_id))
        while len(lines) < 8 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        logger.stop()
        runtime.close(grace_s=0.5)
    records = lines
    assert all(r["msg"] == "run state" and r["ts"].endswith("+00:00") for r in records)
    first = [(r["state"], r.get("reason")) for r in records if r["run_id"] == ticket.run_id]
    assert first == [
        ("accepted", None),
        ("in_progress", None),
        ("awaiting_approval", None),
        ("in_progress", None),
        ("done", "final_answer"),
    ]
    second = [(r["state"], r.get("reason")) for r in records if r["run_id"] == failed.run_id]
    assert second == [("accepted", None), ("in_progress", None), ("failed", "provider_error")]
    accepted = next(r for r in records if r["state"] == "accepted")
    assert accepted["session_id"] == ticket.session_id


def test_client_commands_find_a_node_on_ports_only_it_knows(
    daemons: list[Daemon], data_dir: Path
) -> None:
    """Port 0 from the node's own environment: only node.json says where it listens. Client
    commands (HTTP: approvals; gRPC: chat) find it without the node's environment; a clean stop
    removes the file, and one a killed node left is ignored, then replaced at the next start."""
    daemon = start(daemons, data_dir)
    ready = daemon.wait_for("reel node ready")
    written = json.loads((data_dir / "node.json").read_text())
    assert written["pid"] == daemon.process.pid
    assert ready["console"] == f"http://127.0.0.1:{written['http_port']}/"
    assert ready["grpc"] == f"127.0.0.1:{written['grpc_port']}"
    assert (data_dir / "node.json").stat().st_mode & 0o777 == 0o600
    listed = reel("approvals", "list", "--json", "--data", str(data_dir))
    assert (listed.returncode, json.loads(listed.stdout)) == (0, []), listed
    chat = reel("chat", "--new", "--data", str(data_dir), "hello there")
    assert chat.returncode == 0 and "hello there" in chat.stdout, chat
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.finish() == 0
    assert not (data_dir / "node.json").exists()

    killed = start(daemons, data_dir)
    killed.wait_for("reel node ready")
    killed.kill()
    stale = json.loads((data_dir / "node.json").read_text())
    assert stale["pid"] == killed.process.pid
    offline = reel("approvals", "list", "--json", "--data", str(data_dir))
    assert (offline.returncode, json.loads(offline.stdout)) == (0, []), offline
    dead = reel("chat", "--new", "--data", str(data_dir), "anyone?")
    assert dead.returncode == 2 and f":{stale['grpc_port']}" not in dead.stderr, dead
    again = start(daemons, data_dir)
    again.wait_for("reel node ready")
    assert json.loads((data_dir / "node.json").read_text())["pid"] == again.process.pid
    again.process.send_signal(signal.SIGTERM)
    assert again.finish() == 0


def test_run_state_lines_committed_before_stop_are_all_written(tmp_path: Path) -> None:
    """The logger reads at most once per pause: what the last pause held back is written at
    stop, and rows of other kinds make no line."""
    with Journal(tmp_path / "journal.db") as journal:
        lines: list[dict[str, Any]] = []
        logger = RunStateLogger(journal, lines.append)
        logger.start()
        runs = []
        for _ in range(5):
            session_id, run_id = new_id(), new_id()
            stream = f"session/{session_id}"
            journal.append(stream, [SessionCreated(session_id=session_id)], expected_seq=0)
            journal.append(
                stream,
                [RunAccepted(run_id=run_id, session_id=session_id, text="x")],
                expected_seq=1,
                correlation_id=run_id,
            )
            runs.append((run_id, session_id))
        logger.stop()
    assert [(r["run_id"], r["session_id"], r["state"]) for r in lines] == [
        (run_id, session_id, "accepted") for run_id, session_id in runs
    ]
