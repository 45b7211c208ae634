"""Restart equivalence with real processes: a node is ``kill -9``ed with a run in one state, a new
``reel node`` process is started on the same data dir, and the run must end exactly as
docs/architecture.md ("Runs waiting for a human survive restarts; other in-flight runs fail
``interrupted``") and docs/operations.md ("After a crash") promise:

* a run waiting for an approval is resumed: the approval is pending again with the time it had
  left (or is denied ``timeout`` at once if that ran out while the node was down), or takes
  effect if it was decided meanwhile with ``reel approvals``; "the run then goes on exactly as
  it would have without the crash". That is checked literally: the run's tape after the restart,
  minus ids and time-derived values, equals the tape of the same run done without a crash in a
  fresh data dir, decided the same way;
* every other in-flight run (queued, streaming a turn, running a tool, being cancelled) fails
  with reason ``interrupted``, after its unfinished tool invocations are completed
  ``interrupted``, so the run's terminal event is last in its tape; the restarted node resolves
  this before it serves anything and logs ``recovered after an unclean stop`` naming the runs.

After every restart the node is stopped (SIGTERM, exit 0), then ``reel journal verify`` and
``reel replay`` must exit 0 on the data dir, and the run's tape must hold exactly one terminal
event, last.

Who does what:

* the approval cases run the real ``reel node`` before and after the crash and talk to it over
  HTTP (runs and live decisions are made by the principal ``http``), so the crashed run and its
  crash-free twin are started and decided by the same client;
* the other cases bring the run into its state in ``restart_child.py`` (``open_runtime`` in a
  child process, the composition ``reel node`` uses), which can wait inside the process for the
  exact state, or kill itself at an exact point: between a cancel and its first append (7),
  between a live decision and ``run.resumed`` (3b), between ``tool.approval_requested`` and
  ``run.awaiting_approval`` (3c). The restart is always the real ``reel node``.

A node that does not stop within 30 s of SIGTERM is aborted with ``PYTHONFAULTHANDLER`` set, so
the failure shows every thread's stack.

The tape is read from the journal (the source of truth), never from the views.

The default run holds one case of each family (1 to 7, 4 denied with a reason); the variants of
3, 4 and 5 (3b, 4 allowed, 4b, 5b) are marked ``slow`` and run in ``make test-slow``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import msgspec
import pytest

from events import JournalReader, StoredEvent, is_ulid
from events.catalog import (
    ApprovalRequested,
    ApprovalResolved,
    RunCancelRequested,
    RunCompleted,
    RunFailed,
    ToolCompleted,
    ToolDecided,
)
from tests import processes
from tests.actors import restart_child
from tests.events.decoded import decoded

REEL = Path(sys.executable).with_name("reel")
CHILD = Path(restart_child.__file__)
TERMINAL = ("run.completed", "run.failed", "run.cancelled")
DEADLINE_S = 40.0
"""Generous: only there so a broken node fails the test instead of hanging it."""

APPROVAL_TEXT = 'needs approval\n/tool shell.run {"argv": ["echo", "approved"]}'
APPROVAL_TIMEOUT_S = 3.0
DENY_REASON = "not on a friday"

BASE_CONFIG = """\
[http]
port = 0
[grpc]
port = 0
[tools]
shell_allowlist = ["echo"]
"""

TIME_FIELDS = frozenset({"expires_at_ms", "waited_ms", "duration_ms", "recorded_at_ms"})
"""Payload fields derived from the clock (the envelope's times, positions, event ids and stream
names are left out of the comparison altogether)."""


# --- processes -------------------------------------------------------------------------------


class RestartableNode:
    """A running ``reel node`` on a data dir; its stderr JSON lines are collected on a thread."""

    def __init__(self, stack: ExitStack, data: Path) -> None:
        """Start the node under ``stack`` (it ends when the stack closes, even if its ready line
        never comes) and wait for its ready line."""
        self.data = data
        self.launched_ms = time.time_ns() // 1_000_000
        self.process: subprocess.Popen[str] = stack.enter_context(
            processes.node(
                "--data",
                data,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT dumps every thread
            )
        )
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        ready = self.wait_for("reel node ready")
        self.ready_ms = time.time_ns() // 1_000_000
        """When its ready line was read: the start-up's own cost (imports, recovery) is before."""
        self.url = ready["console"].rstrip("/")
        self.token = (data / "admin.token").read_text().strip()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()
        with self._new:
            self._new.notify_all()

    def logged(self, message: str) -> dict[str, Any] | None:
        """The first JSON log line whose ``msg`` is ``message``, if it was logged."""
        with self._new:
            for line in self.lines:
                if line.startswith("{"):
                    entry = json.loads(line)
                    if entry.get("msg") == message:
                        return entry  # type: ignore[no-any-return]
        return None

    def wait_for(self, message: str, timeout: float = DEADLINE_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            entry = self.logged(message)
            if entry is not None:
                return entry
            with self._new:
                dead = self.process.poll() is not None and not self._reader.is_alive()
                left = deadline - time.monotonic()
                if left <= 0 or dead:
                    raise AssertionError(f"no {message!r} line; stderr: {self.lines}")
                self._new.wait(min(left, 0.2))

    def http(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")
        except (TimeoutError, urllib.error.URLError):
            pytest.fail(f"{method} {path}: no answer; node stderr: {self.lines}")

    def kill9(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        assert self.process.wait(10) == -signal.SIGKILL
        self._reader.join(10)

    def stop(self) -> None:
        """SIGTERM: the node drains and exits 0, with no traceback."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)  # the stacks, for the report
            self.process.wait(10)
            self._reader.join(10)
            stacks = "\n".join(self.lines)
            pytest.fail(f"reel node did not stop within 30 s of SIGTERM; stderr:\n{stacks}")
        assert code == 0, self.lines
        self._reader.join(10)
        assert not any("Traceback" in line for line in self.lines), self.lines


@pytest.fixture
def daemons() -> Iterator[Callable[[Path], RestartableNode]]:
    """Start a node on a data dir; every one is stopped when the test ends."""
    with ExitStack() as stack:
        yield lambda data: RestartableNode(stack, data)


def reel(*args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [str(REEL), *args], capture_output=True, text=True, check=False, timeout=60
    )


def new_data_dir(root: Path, config: str = BASE_CONFIG) -> Path:
    root.mkdir(parents=True)
    (root / "config.toml").write_text(config)
    return root


SELF_KILLING = ("cancelling", "marking", "decided", "cancel_awaiting", "cancel_denied")
"""Scenarios whose child kills itself (SIGKILL) at an exact point instead of waiting for ours."""


def run_child(scenario: str, data: Path) -> tuple[dict[str, str], subprocess.Popen[str]]:
    """Start ``restart_child.py SCENARIO`` and read the ids it prints once in its state."""
    process = subprocess.Popen(
        [sys.executable, str(CHILD), scenario, str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()))  # type: ignore[union-attr]
    reader.start()
    reader.join(DEADLINE_S)
    if not lines or not lines[0]:
        process.kill()
        _, err = process.communicate(timeout=10)
        pytest.fail(f"the {scenario} child printed nothing within {DEADLINE_S} s; stderr:\n{err}")
    return json.loads(lines[0]), process


def crash_child(scenario: str, data: Path) -> tuple[dict[str, str], list[StoredEvent]]:
    """Run ``restart_child.py SCENARIO`` until its run is in the scenario's state and the child
    is dead by SIGKILL (ours, or its own for the :data:`SELF_KILLING` scenarios). Returns the
    ids it printed and the run's tape as the crash left it."""
    ids, process = run_child(scenario, data)
    try:
        if scenario in SELF_KILLING:
            try:
                process.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{scenario}: the child did not reach its kill point in 20 s")
        else:
            os.kill(process.pid, signal.SIGKILL)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert process.returncode == -signal.SIGKILL, err
    return ids, tape_of(data, ids["run"])


# --- the tape --------------------------------------------------------------------------------


def tape_of(data: Path, run_id: str) -> list[StoredEvent]:
    """The run's tape from the journal: the events correlated with it, in journal order."""
    reader = JournalReader.open(data / "journal.db")
    try:
        return reader.read_correlated(run_id)
    finally:
        reader.close()


def wait_tape(
    data: Path,
    run_id: str,
    done: Callable[[list[StoredEvent]], bool],
    what: str,
    timeout: float = DEADLINE_S,
) -> list[StoredEvent]:
    """Poll the journal until the run's tape satisfies ``done``."""
    deadline = time.monotonic() + timeout
    while True:
        tape = tape_of(data, run_id) if (data / "journal.db").exists() else []
        if done(tape):
            return tape
        assert time.monotonic() < deadline, f"no {what} in run {run_id}: {kinds(tape)}"
        time.sleep(0.02)


def wait_kind(data: Path, run_id: str, kind: str) -> list[StoredEvent]:
    return wait_tape(data, run_id, lambda tape: kind in kinds(tape), kind)


def wait_end(data: Path, run_id: str, timeout: float = DEADLINE_S) -> list[StoredEvent]:
    return wait_tape(
        data, run_id, lambda tape: any(s.kind in TERMINAL for s in tape), "end", timeout
    )


def kinds(tape: list[StoredEvent]) -> list[str]:
    return [s.kind for s in tape]


def describe(tape: list[StoredEvent]) -> str:
    """The tape on one line per event, with what decides the outcome (for failure messages:
    a string, so pytest does not shorten it)."""
    keys = ("decision", "decided_by", "reason", "ok", "error_kind", "answer", "requested_by")
    lines = []
    for stored in tape:
        event = msgspec.to_builtins(stored.decode())
        shown = {k: event[k] for k in keys if k in event and event[k] not in ("", None)}
        lines.append(f"  {stored.kind} by {stored.principal} {shown if shown else ''}".rstrip())
    return "tape:\n" + "\n".join(lines)


def first(tape: list[StoredEvent], kind: str) -> Any:
    return next(s.decode() for s in tape if s.kind == kind)


def all_of(tape: list[StoredEvent], kind: str) -> list[Any]:
    return [s.decode() for s in tape if s.kind == kind]


def normalised(tape: list[StoredEvent], *, human: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The tape without ids and times: (kind, principal, payload) per event, every ULID replaced
    by its order of first appearance (so references between events still have to match), the
    payload's clock-derived fields dropped, and consecutive ``run.output`` chunks of one turn
    joined (the chunking is time-derived: "at most 16 words or 50 ms").

    ``human``: principals that decided the approval and necessarily differ between the two
    paths compared (the offline ``reel approvals`` command records ``cli``, a live client
    ``http``); they are replaced by ``<human>`` where the decision is recorded
    (``tool.approval_resolved``'s envelope principal and ``decided_by``) and where it is quoted
    (``denied by <principal>`` in the tool's error and so in the model's answer)."""
    ids: dict[str, str] = {}

    def scrub(value: Any) -> Any:
        if isinstance(value, str):
            if is_ulid(value):
                return ids.setdefault(value, f"<id {len(ids) + 1}>")
            for who in human:
                value = value.replace(f"denied by {who}", "denied by <human>")
            return value
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if k not in TIME_FIELDS}
        if isinstance(value, list | tuple):
            return [scrub(v) for v in value]
        return value

    rows: list[dict[str, Any]] = []
    for stored in tape:
        event = msgspec.to_builtins(stored.decode())
        principal = stored.principal
        if stored.kind == "tool.approval_resolved" and human:
            if event.get("decided_by") in human:
                event["decided_by"] = "<human>"
            if principal in human:
                principal = "<human>"
        last = rows[-1] if rows else None
        if (
            stored.kind == "run.output"
            and last is not None
            and last["kind"] == "run.output"
            and last["event"]["turn"] == event["turn"]
        ):
            last["event"]["text"] += event["text"]
            continue
        rows.append({"kind": stored.kind, "principal": principal, "event": event})
    return [{**row, "event": scrub(row["event"])} for row in rows]


# --- checks ----------------------------------------------------------------------------------


def assert_audit_clean(data: Path, run_id: str) -> list[StoredEvent]:
    """On the stopped data dir: verify and replay exit 0; the run ended once, last."""
    verified = reel("journal", "verify", "--data", str(data))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    replayed = reel("replay", "--data", str(data))
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    tape = tape_of(data, run_id)
    ends = [s.kind for s in tape if s.kind in TERMINAL]
    assert len(ends) == 1, kinds(tape)
    assert tape[-1].kind in TERMINAL, kinds(tape)
    return tape


def assert_interrupted(tape: list[StoredEvent]) -> None:
    """Failed ``interrupted``, every tool invocation completed (``interrupted`` if it was cut
    off) before that, and the end's totals are the tape's."""
    assert tape[-1].kind == "run.failed", kinds(tape)
    end = decoded(tape[-1], RunFailed)
    assert end.reason == "interrupted", end
    proposed = {e.invocation_id for e in all_of(tape, "tool.proposed")}
    completed = {e.invocation_id for e in all_of(tape, "tool.completed")}
    assert proposed == completed, kinds(tape)
    assert end.turns == kinds(tape).count("run.turn_completed"), end
    assert end.tool_calls == len(proposed), end


def assert_recovered_before_serving(daemon: RestartableNode, *run_ids: str) -> None:
    """The restarted node resolved the runs before it was ready, and said so."""
    for run_id in run_ids:  # the node is ready: the ends must already be on the journal
        assert any(s.kind in TERMINAL for s in tape_of(daemon.data, run_id)), run_id
    line = daemon.logged("recovered after an unclean stop")
    assert line is not None, daemon.lines
    assert set(run_ids) <= set(line["interrupted_runs"]), line


# --- the approval cases: reel node, HTTP ---------------------------------------------------------


def start_approval_run(daemon: RestartableNode) -> tuple[str, str, list[StoredEvent]]:
    """A run of ``shell.run`` in a new session, waiting for its approval. Returns the run id,
    the approval id and the tape so far."""
    status, session = daemon.http("POST", "/v1/sessions", {})
    assert status == 201, session
    status, started = daemon.http(
        "POST", f"/v1/sessions/{session['session_id']}/messages", {"text": APPROVAL_TEXT}
    )
    assert status == 202 and not started["queued"], started
    run_id = started["run_id"]
    tape = wait_kind(daemon.data, run_id, "run.awaiting_approval")
    return run_id, first(tape, "tool.approval_requested").approval_id, tape


def decide_live(daemon: RestartableNode, approval_id: str, decision: str, reason: str) -> None:
    body = {"decision": decision, "reason": reason}
    status, record = daemon.http("POST", f"/v1/approvals/{approval_id}", body)
    assert status == 200, record


def decide_offline(data: Path, approval_id: str, decision: str, reason: str) -> None:
    if decision == "allow":
        done = reel("approvals", "approve", approval_id, "--data", str(data))
    else:
        done = reel("approvals", "deny", approval_id, "--reason", reason, "--data", str(data))
    assert done.returncode == 0, done.stdout + done.stderr


def crash_free(
    root: Path, decision: str, reason: str, config: str = BASE_CONFIG
) -> list[StoredEvent]:
    """The tape of the same run done without a crash in a fresh data dir: decided live over
    HTTP (``decision`` ``"timeout"``: left to time out). Returns the stored tape."""
    data = new_data_dir(root, config)
    with ExitStack() as stack:
        daemon = RestartableNode(stack, data)
        run_id, approval_id, _ = start_approval_run(daemon)
        if decision != "timeout":
            decide_live(daemon, approval_id, decision, reason)
        wait_end(data, run_id)
        daemon.stop()
    return tape_of(data, run_id)


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[StoredEvent]]:
    """Crash-free tapes, made once per (decision, reason, config) for the whole module."""
    made: dict[tuple[str, str, str], list[StoredEvent]] = {}

    def twin(decision: str, reason: str = "", config: str = BASE_CONFIG) -> list[StoredEvent]:
        key = (decision, reason, config)
        if key not in made:
            made[key] = crash_free(
                tmp_path_factory.mktemp("twin") / "data", decision, reason, config
            )
        return made[key]

    return twin


@pytest.fixture(scope="module")
def child_twin(tmp_path_factory: pytest.TempPathFactory) -> list[StoredEvent]:
    """The ``decided`` and ``marking`` run without a crash: started and allowed in-process by
    ``operator`` in ``restart_child.py twin``, which then stops cleanly."""
    data = new_data_dir(tmp_path_factory.mktemp("child-twin") / "data")
    ids, process = run_child("twin", data)
    _, err = process.communicate(timeout=DEADLINE_S)
    assert process.returncode == 0, err
    return tape_of(data, ids["run"])


def crash_while_awaiting(
    daemons: Callable[[Path], RestartableNode], data: Path
) -> tuple[str, str, list[StoredEvent]]:
    """A real node brings a run to ``run.awaiting_approval`` and is ``kill -9``ed."""
    first_node = daemons(data)
    run_id, approval_id, _ = start_approval_run(first_node)
    first_node.kill9()
    tape = tape_of(data, run_id)
    assert tape[-1].kind == "run.awaiting_approval", kinds(tape)
    return run_id, approval_id, tape


def assert_resumed(daemon: RestartableNode, run_id: str) -> None:
    """The restarted node did not interrupt the run waiting for a human, and its recovery line
    names the run among the resumed ones (operations.md: the line "lists what was resolved:
    interrupted runs, closed approvals and resumed runs")."""
    line = daemon.logged("recovered after an unclean stop")
    assert line is not None, daemon.lines
    assert run_id not in line["interrupted_runs"], line
    assert run_id in line["resumed_runs"], line
    assert "interrupted" not in json.dumps(normalised(tape_of(daemon.data, run_id)))


def test_3_awaiting_approval_decided_live_after_the_restart(
    daemons: Callable[[Path], RestartableNode],
    tmp_path: Path,
    twins: Callable[..., list[StoredEvent]],
) -> None:
    """The approval is pending again after the restart (the same approval: a live decision on
    its id takes effect), and the run goes on exactly as the crash-free twin decided the same
    way over HTTP."""
    data = new_data_dir(tmp_path / "data")
    run_id, approval_id, _ = crash_while_awaiting(daemons, data)
    node = daemons(data)
    assert_resumed(node, run_id)
    status, record = node.http("GET", f"/v1/approvals/{approval_id}")
    assert status == 200 and record["state"] == "pending", record
    decide_live(node, approval_id, "allow", "")
    wait_end(data, run_id)
    node.stop()
    tape = assert_audit_clean(data, run_id)
    assert tape[-1].kind == "run.completed", kinds(tape)
    assert normalised(tape) == normalised(twins("allow"))


@pytest.mark.parametrize(
    ("decision", "reason"),
    # deny (with a reason) is the default run's representative; allow is test 3's path offline
    [pytest.param("allow", "", marks=pytest.mark.slow), ("deny", DENY_REASON)],
)
def test_4_awaiting_approval_decided_offline_then_restarted(
    daemons: Callable[[Path], RestartableNode],
    tmp_path: Path,
    twins: Callable[..., list[StoredEvent]],
    decision: str,
    reason: str,
) -> None:
    """``reel approvals approve|deny`` on the stopped data dir, then a restart: the decision
    takes effect and the run goes on exactly as its crash-free twin decided live over HTTP.

    The decider necessarily differs (``cli`` offline, ``http`` live), so it is normalised in
    the comparison, and only there (see :func:`normalised`)."""
    data = new_data_dir(tmp_path / "data")
    run_id, approval_id, _ = crash_while_awaiting(daemons, data)
    decide_offline(data, approval_id, decision, reason)
    other = "deny" if decision == "allow" else "allow"
    again = reel(
        "approvals", "deny" if other == "deny" else "approve", approval_id, "--data", str(data)
    )
    assert again.returncode == 1 and "already resolved" in again.stderr, again  # first wins ...
    node = daemons(data)
    assert_resumed(node, run_id)
    status, refused = node.http("POST", f"/v1/approvals/{approval_id}", {"decision": other})
    assert status == 409, refused  # ... and after the restart
    wait_end(data, run_id)
    node.stop()
    tape = assert_audit_clean(data, run_id)
    assert tape[-1].kind == "run.completed", kinds(tape)
    resolved = all_of(tape, "tool.approval_resolved")
    assert [(r.decision, r.decided_by, r.reason) for r in resolved] == [(decision, "cli", reason)]
    human = ("cli", "admin")
    assert normalised(tape, human=human) == normalised(twins(decision, reason), human=human)


def test_5_approval_times_out_while_the_node_is_down(
    daemons: Callable[[Path], RestartableNode],
    tmp_path: Path,
    twins: Callable[..., list[StoredEvent]],
) -> None:
    """``approvals.timeout_s`` runs out while the node is down: on restart the approval is
    denied ``timeout`` by ``node`` at once (not after a fresh time-out), and the run goes on
    exactly as its crash-free twin whose approval timed out live."""
    config = BASE_CONFIG + f"[approvals]\ntimeout_s = {APPROVAL_TIMEOUT_S}\n"
    data = new_data_dir(tmp_path / "data", config)
    run_id, _, tape = crash_while_awaiting(daemons, data)
    expires_at_ms = first(tape, "tool.approval_requested").expires_at_ms
    while time.time_ns() // 1_000_000 <= expires_at_ms + 100:  # the node is down: wall clock
        time.sleep(0.05)
    node = daemons(data)
    assert_resumed(node, run_id)
    tape = wait_end(data, run_id)
    node.stop()
    resolution = next(s for s in tape if s.kind == "tool.approval_resolved")
    event = decoded(resolution, ApprovalResolved)
    assert (event.decision, event.reason, event.decided_by) == ("deny", "timeout", "node")
    # Measured from the ready line, not the launch: a loaded machine may take seconds to start.
    assert resolution.recorded_at_ms - node.ready_ms < APPROVAL_TIMEOUT_S * 1000, (
        "the expired approval waited for a new time-out after the restart"
    )
    tape = assert_audit_clean(data, run_id)
    assert tape[-1].kind == "run.completed", kinds(tape)
    assert normalised(tape) == normalised(twins("timeout", "", config))


# --- the interrupted cases: restart_child.py, then reel node -----------------------------------


def test_1_a_queued_run_fails_interrupted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """A run accepted but not started (queued behind a run of its session busy in the
    provider) fails ``interrupted`` without ever starting; so does the run ahead of it; the
    session then takes a new message at once (nothing left queued or live) and completes it."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("queued", data)
    assert kinds(at_crash) == ["run.accepted"]
    # killed while busy in the provider, or a moment earlier (before its context was recorded)
    before = kinds(tape_of(data, ids["first"]))
    assert before[-1] in ("run.started", "run.context_assembled")
    node = daemons(data)
    assert_recovered_before_serving(node, ids["run"], ids["first"])
    status, started = node.http(
        "POST", f"/v1/sessions/{ids['session']}/messages", {"text": "after the crash"}
    )
    assert status == 202 and not started["queued"], started
    after = wait_end(data, started["run_id"])
    node.stop()
    assert (
        after[-1].kind == "run.completed"
        and decoded(after[-1], RunCompleted).answer == "after the crash"
    )
    tape = assert_audit_clean(data, ids["run"])
    assert kinds(tape) == ["run.accepted", "run.failed"]
    assert_interrupted(tape)
    ahead = assert_audit_clean(data, ids["first"])
    assert kinds(ahead) == [*before, "run.failed"]
    assert_interrupted(ahead)


def test_2_a_run_streaming_a_turn_fails_interrupted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """Mid-stream (``provider.chunk_delay_s`` makes the answer slow): the output recorded
    before the crash stays on the tape, the turn is never completed, the run fails
    ``interrupted``."""
    data = new_data_dir(tmp_path / "data", BASE_CONFIG + "[provider]\nchunk_delay_s = 0.02\n")
    ids, at_crash = crash_child("streaming", data)
    assert "run.output" in kinds(at_crash) and "run.turn_completed" not in kinds(at_crash)
    node = daemons(data)
    assert_recovered_before_serving(node, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert_interrupted(tape)
    assert tape[: len(at_crash)] == at_crash  # nothing recorded was changed or lost
    assert kinds(tape) == [*kinds(at_crash), "run.failed"]
    text = "".join(e.text for e in all_of(tape, "run.output"))
    assert text and restart_child.STREAMING.startswith(text)


def test_6_a_run_running_a_tool_fails_interrupted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """The ``sleep`` tool is executing when the node dies: its invocation is completed
    ``interrupted``, then the run fails ``interrupted``."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("tool", data)
    assert (
        kinds(at_crash)[-1] == "tool.decided"
        and decoded(at_crash[-1], ToolDecided).outcome == "allow"
    )
    node = daemons(data)
    assert_recovered_before_serving(node, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert_interrupted(tape)
    assert tape[: len(at_crash)] == at_crash
    assert kinds(tape) == [*kinds(at_crash), "tool.completed", "run.failed"]
    done = decoded(tape[-2], ToolCompleted)
    assert (done.ok, done.error_kind) == (False, "interrupted"), done


def test_7_a_run_being_cancelled_fails_interrupted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """A cancel was requested while the ``sleep`` tool ran and the node died before anything
    more was written (the child kills itself just before the cancellation's first append).
    The docs list "being cancelled" among the runs that fail ``interrupted``: the cancel request
    left nothing on the journal, so the run ends ``interrupted``, not ``cancelled``, its tool
    completed ``interrupted`` first."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("cancelling", data)
    assert kinds(at_crash)[-1] == "tool.decided", kinds(at_crash)  # the window was hit
    node = daemons(data)
    assert_recovered_before_serving(node, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert_interrupted(tape)
    assert kinds(tape) == [*kinds(at_crash), "tool.completed", "run.failed"]
    done = decoded(tape[-2], ToolCompleted)
    assert (done.ok, done.error_kind) == (False, "interrupted"), done
    assert re.search("cancel", json.dumps(normalised(tape))) is None


def test_7b_a_cancel_the_node_died_before_recording_was_never_accepted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """A cancel was asked for while the run waited for its approval, and the node died before
    it recorded anything of it (the child kills itself just before ``run.cancel_requested``).

    A cancel is acknowledged only once ``run.cancel_requested`` is durable, so this one was
    never acknowledged (the client saw its connection drop): the run is what the journal says,
    a run waiting for a human, and it is resumed with its approval pending, like test 3."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("cancel_awaiting", data)
    assert kinds(at_crash)[-1] == "run.awaiting_approval", kinds(at_crash)  # the window was hit
    approval_id = first(at_crash, "tool.approval_requested").approval_id
    node = daemons(data)
    status, record = node.http("GET", f"/v1/approvals/{approval_id}")
    node.stop()
    assert status == 200 and record["state"] == "pending", record
    assert_resumed(node, ids["run"])
    assert tape_of(data, ids["run"]) == at_crash


def test_7c_a_recorded_cancel_of_a_run_awaiting_approval_fails_it_interrupted(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path
) -> None:
    """A cancel was accepted while the run waited for its approval (``run.cancel_requested``
    is on the tape) and the node died before it closed the call (the child kills itself just
    before the append of the node's denial and ``tool.completed``, which go together).

    operations.md: a run being cancelled fails ``interrupted`` after a restart, its pending
    approval denied ``interrupted`` by ``node``. A demanding operator expects a cancel the node
    accepted never to be forgotten: the run must not come back waiting for an approval that
    someone could then allow, running the very call the operator cancelled."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("cancel_denied", data)
    assert kinds(at_crash)[-2:] == ["run.awaiting_approval", "run.cancel_requested"], kinds(
        at_crash
    )
    assert decoded(at_crash[-1], RunCancelRequested).requested_by == "operator"
    approval_id = first(at_crash, "tool.approval_requested").approval_id
    node = daemons(data)
    wait_end(data, ids["run"])
    status, record = node.http("GET", f"/v1/approvals/{approval_id}")
    node.stop()
    assert status == 200 and record["state"] != "pending", record
    tape = tape_of(data, ids["run"])
    assert tape[: len(at_crash)] == at_crash
    assert kinds(tape) == [
        *kinds(at_crash),
        "tool.approval_resolved",
        "tool.completed",
        "run.failed",
    ], describe(tape)
    line = node.logged("recovered after an unclean stop")
    assert line is not None and ids["run"] in line["interrupted_runs"], line
    assert ids["run"] not in line["resumed_runs"], line
    assert approval_id in line["closed_approvals"], line
    tape = assert_audit_clean(data, ids["run"])
    assert_interrupted(tape)
    resolved = first(tape, "tool.approval_resolved")
    assert (resolved.decision, resolved.decided_by, resolved.reason) == (
        "deny",
        "node",
        "interrupted",
    ), resolved
    done = decoded(tape[-2], ToolCompleted)
    assert (done.ok, done.error_kind) == (False, "interrupted"), done


# --- the windows around an approval: restart_child.py, then reel node ----------------------------


@pytest.mark.slow  # a variant of its family: make test-slow
def test_3b_decided_live_and_killed_before_the_run_resumed(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path, child_twin: list[StoredEvent]
) -> None:
    """A human allowed the call live and the node died before the run acted on it
    (``tool.approval_resolved`` is on the tape, ``run.resumed`` is not). The architecture page
    counts a run whose next step is "to act on a decision" among those resumed: after the
    restart the decision takes effect, the approved call runs, and the run goes on exactly as
    its crash-free twin (decided the same way, by ``operator``)."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("decided", data)
    assert kinds(at_crash)[-2:] == ["run.awaiting_approval", "tool.approval_resolved"]
    node = daemons(data)
    assert_resumed(node, ids["run"])
    wait_end(data, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert tape[: len(at_crash)] == at_crash
    assert tape[-1].kind == "run.completed", kinds(tape)
    assert normalised(tape) == normalised(child_twin)


def test_3c_killed_before_the_run_was_marked_awaiting(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path, child_twin: list[StoredEvent]
) -> None:
    """The approval was requested and the node died before ``run.awaiting_approval`` was
    appended. The architecture page counts a run whose next step is "to mark itself waiting"
    among those resumed: after the restart the run is marked waiting once, the approval is
    pending, a live decision over HTTP takes effect, and the run goes on exactly as its
    crash-free twin.

    The decider necessarily differs: the twin is decided in-process by ``operator`` (who
    started both runs), the restarted ``reel node`` only takes decisions from a client
    (``http``); so the decider is normalised in the comparison."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("marking", data)
    assert kinds(at_crash)[-1] == "tool.approval_requested", kinds(at_crash)
    approval_id = decoded(at_crash[-1], ApprovalRequested).approval_id
    node = daemons(data)
    assert_resumed(node, ids["run"])
    wait_kind(data, ids["run"], "run.awaiting_approval")
    status, record = node.http("GET", f"/v1/approvals/{approval_id}")
    assert status == 200 and record["state"] == "pending", record
    decide_live(node, approval_id, "allow", "")
    wait_end(data, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert tape[: len(at_crash)] == at_crash
    assert tape[-1].kind == "run.completed", kinds(tape)
    human = ("operator", "admin")
    assert normalised(tape, human=human) == normalised(child_twin, human=human)


@pytest.mark.slow  # a variant of its family: make test-slow
def test_5b_an_approval_keeps_the_time_it_had_left(
    daemons: Callable[[Path], RestartableNode],
    tmp_path: Path,
    twins: Callable[..., list[StoredEvent]],
) -> None:
    """The node is down for part of ``approvals.timeout_s``: after the restart the approval is
    pending again "with the time it had left", so it times out at the instant it was due to
    (``expires_at_ms`` of the request), neither earlier nor a whole time-out after the restart,
    and the run goes on exactly as its crash-free twin."""
    config = BASE_CONFIG + f"[approvals]\ntimeout_s = {APPROVAL_TIMEOUT_S}\n"
    data = new_data_dir(tmp_path / "data", config)
    run_id, approval_id, tape = crash_while_awaiting(daemons, data)
    expires_at_ms = first(tape, "tool.approval_requested").expires_at_ms
    time.sleep(1.0)  # the node is down for a while (wall clock, not synchronisation)
    node = daemons(data)
    # On a loaded machine the restart can come after the expiry: then the approval must be
    # denied at once rather than pending for a new time-out; the assertions below hold both ways.
    assert_resumed(node, run_id)
    status, record = node.http("GET", f"/v1/approvals/{approval_id}")
    answered_ms = time.time() * 1000
    assert status == 200, record
    # Pending while it has time left (on a loaded machine the answer may come after the
    # expiry; the journal below still proves it was not resolved before it was due).
    if answered_ms < expires_at_ms:
        assert record["state"] == "pending", record
    tape = wait_end(data, run_id)
    node.stop()
    resolution = next(s for s in tape if s.kind == "tool.approval_resolved")
    event = decoded(resolution, ApprovalResolved)
    assert (event.decision, event.reason, event.decided_by) == ("deny", "timeout", "node")
    assert resolution.recorded_at_ms >= expires_at_ms - 10, "timed out before it was due"
    assert resolution.recorded_at_ms < node.launched_ms + APPROVAL_TIMEOUT_S * 1000, (
        "the approval got a whole new time-out after the restart"
    )
    tape = assert_audit_clean(data, run_id)
    assert tape[-1].kind == "run.completed", kinds(tape)
    assert normalised(tape) == normalised(twins("timeout", "", config))


@pytest.mark.slow  # a variant of its family: make test-slow
def test_4b_killed_before_the_mark_then_decided_offline(
    daemons: Callable[[Path], RestartableNode], tmp_path: Path, child_twin: list[StoredEvent]
) -> None:
    """The node died between ``tool.approval_requested`` and ``run.awaiting_approval``, and an
    operator allowed the approval with ``reel approvals approve`` before the restart, so the
    decision is on the journal before the run ever marked itself waiting. After the restart the
    run marks itself waiting, acts on the decision at once (``run.resumed``), and goes on as
    its crash-free twin. The journal's order cannot be the twin's (the decision really came
    before the mark), so the decision is compared on its own and the rest of the tape in order;
    the decider is normalised (``cli`` offline, ``operator`` in the twin)."""
    data = new_data_dir(tmp_path / "data")
    ids, at_crash = crash_child("marking", data)
    assert kinds(at_crash)[-1] == "tool.approval_requested", kinds(at_crash)
    decide_offline(data, decoded(at_crash[-1], ApprovalRequested).approval_id, "allow", "")
    node = daemons(data)
    assert_resumed(node, ids["run"])
    wait_end(data, ids["run"])
    node.stop()
    tape = assert_audit_clean(data, ids["run"])
    assert tape[-1].kind == "run.completed", kinds(tape)
    after = kinds(tape)[len(at_crash) :]
    assert after[:4] == [
        "tool.approval_resolved",
        "run.awaiting_approval",
        "run.resumed",
        "tool.completed",
    ], after
    human = ("operator", "cli")

    def split(stored: list[StoredEvent]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        rows = normalised(stored, human=human)
        decision = [r for r in rows if r["kind"] == "tool.approval_resolved"]
        return decision, [r for r in rows if r["kind"] != "tool.approval_resolved"]

    assert split(tape) == split(child_twin)
