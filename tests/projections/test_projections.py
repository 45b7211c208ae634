"""Projections: determinism (live views equal a replay from zero), tape numbering, version bumps,
deleting views.db, and the `reel replay` command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw
import pytest

from actors.messages import CancelRun, ResolveApproval, StartRun
from events import Journal, JournalReader, JournalUnavailable
from events.catalog import RunAccepted
from projections import Projector, Views, compare, rebuild
from projections.runs import RunsProjection
from projections.usage import UsageProjection
from tests import processes
from transports.config import NodeConfig, ToolsSection
from transports.runtime import Runtime, open_runtime

CONFIG = NodeConfig(tools=ToolsSection(shell_allowlist=("echo",)))
TERMINAL = {"done", "failed", "cancelled"}
REEL = str(Path(sys.executable).with_name("reel"))


def wait_run(rt: Runtime, run_id: str, states: set[str] = TERMINAL, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rt.projector.wait_for(rt.journal.committed_position, timeout=1)
        record = rt.views.run(run_id)
        if record is not None and record.state in states:
            return record.state
        time.sleep(0.02)
    raise AssertionError(f"run {run_id} did not reach {states}")


def pending_approval(rt: Runtime, run_id: str) -> str:
    wait_run(rt, run_id, {"awaiting_approval"})
    return next(a.approval_id for a in rt.views.approvals("pending") if a.run_id == run_id)


def workload(rt: Runtime) -> list[str]:
    """Tools, an approval allowed, one denied, a cancellation and a provider failure."""
    node = rt.node
    runs = []
    t1 = node.ask(StartRun(text='hello\n/tool echo {"text": "a"}\n/tool time.now {}', create=True))
    runs.append(t1.run_id)
    t2 = node.ask(StartRun(text='/tool shell.run {"argv": ["echo", "yo"]}', create=True))
    node.ask(
        ResolveApproval(
            approval_id=pending_approval(rt, t2.run_id), decision="allow", scope="session"
        )
    )
    runs.append(t2.run_id)
    t3 = node.ask(StartRun(text='/tool shell.run {"argv": ["echo", "no"]}', create=True))
    node.ask(ResolveApproval(approval_id=pending_approval(rt, t3.run_id), decision="deny"))
    runs.append(t3.run_id)
    t4 = node.ask(StartRun(text="/sleep 20000", create=True))
    wait_run(rt, t4.run_id, {"in_progress"})
    node.ask(CancelRun(run_id=t4.run_id))
    runs.append(t4.run_id)
    t5 = node.ask(StartRun(text="/fail boom", create=True))
    runs.append(t5.run_id)
    for run_id in runs:
        wait_run(rt, run_id)
    return runs


def assert_replay_identical(data: Path) -> None:
    scratch = data / "replayed.db"
    reader = JournalReader.open(data / "journal.db")
    try:
        rebuild(reader, scratch)
    finally:
        reader.close()
    assert compare(data / "views.db", scratch) == []


def test_live_views_equal_a_replay_from_zero(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        runs = workload(rt)
        states = {r: rt.views.run(r).state for r in runs}  # type: ignore[union-attr]
    finally:
        rt.close(grace_s=0)
    assert list(states.values()) == ["done", "done", "done", "cancelled", "failed"]
    assert_replay_identical(tmp_path)


CHILD = """
import sys, time
from pathlib import Path
from actors.messages import StartRun
from transports.config import NodeConfig, ToolsSection
from transports.runtime import open_runtime
config = NodeConfig(tools=ToolsSection(shell_allowlist=("echo",)))
rt = open_runtime(Path(sys.argv[1]), config=config)
t = rt.node.ask(StartRun(text="/sleep 30000", create=True))
a = rt.node.ask(StartRun(text='/tool shell.run {"argv": ["echo", "x"]}', create=True))
deadline = time.monotonic() + 30  # both at the state the crash is to find them in
while time.monotonic() < deadline:
    rt.projector.wait_for(rt.journal.committed_position, timeout=1)
    states = [getattr(rt.views.run(r), "state", None) for r in (t.run_id, a.run_id)]
    if states == ["in_progress", "awaiting_approval"]:
        break
    time.sleep(0.02)
print(t.run_id, a.run_id, flush=True)
time.sleep(60)
"""


def test_views_after_a_crash_and_restart_equal_a_replay(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    sleeping, waiting = child.stdout.readline().split()
    time.sleep(0.3)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        assert wait_run(rt, sleeping) == "failed"
        assert rt.views.run(sleeping).termination_reason == "interrupted"  # type: ignore[union-attr]
        rt.node.ask(ResolveApproval(approval_id=pending_approval(rt, waiting), decision="allow"))
        assert wait_run(rt, waiting) == "done"
        workload(rt)
    finally:
        rt.close(grace_s=0)
    assert_replay_identical(tmp_path)


def test_tape_is_dense_in_journal_order_and_includes_tool_events(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        ticket = rt.node.ask(
            StartRun(text='x\n/tool echo {"text": "1"}\n/tool echo {"text": "2"}', create=True)
        )
        wait_run(rt, ticket.run_id)
        tape = rt.views.tape(ticket.run_id)
        journal = rt.journal.read_correlated(ticket.run_id)
    finally:
        rt.close(grace_s=0)
    assert [e.tape_seq for e in tape] == list(range(len(tape)))
    assert [e.position for e in tape] == [e.position for e in journal]
    kinds = [e.kind for e in tape]
    assert kinds[0] == "run.accepted" and kinds[-1] == "run.completed"
    assert kinds.count("tool.proposed") == 2 and kinds.count("tool.completed") == 2
    assert {e.stream.split("/")[0] for e in tape} == {"session", "run", "tool"}
    assert isinstance(tape[0].event, RunAccepted) and tape[0].event.text.startswith("x")


def test_a_runs_tool_calls_count_the_models_calls_not_its_reference_reads(
    tmp_path: Path,
) -> None:
    """The runs view counts what ``run.completed`` counts: reading ``@file:`` is the node's
    call (``ref-N``), not the model's."""
    config = NodeConfig(tools=ToolsSection(postures={"fs.read": "always_allow"}))
    rt = open_runtime(tmp_path, config=config)
    try:
        (tmp_path / "workspace" / "a.txt").write_text("alpha")
        ticket = rt.node.ask(
            StartRun(text='see @file:a.txt\n/tool echo {"text": "1"}', create=True)
        )
        wait_run(rt, ticket.run_id)
        record = rt.views.run(ticket.run_id)
        (end,) = [e for e in rt.journal.read_correlated(ticket.run_id) if e.kind == "run.completed"]
        proposed = [
            e.decode().call_id  # type: ignore[attr-defined]
            for e in rt.journal.read_correlated(ticket.run_id)
            if e.kind == "tool.proposed"
        ]
    finally:
        rt.close(grace_s=0)
    assert sorted(c.startswith("ref-") for c in proposed) == [False, True]  # both were calls
    assert record is not None and record.tool_calls == end.decode().tool_calls == 1  # type: ignore[attr-defined]


def test_deleting_views_loses_nothing(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        workload(rt)
        before = {
            r.run_id: r for s in rt.views.sessions() for r in rt.views.runs_of_session(s.session_id)
        }
    finally:
        rt.close(grace_s=0)
    for name in ("views.db", "views.db-wal", "views.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        rt.projector.wait_for(rt.journal.committed_position, timeout=10)
        after = {
            r.run_id: r for s in rt.views.sessions() for r in rt.views.runs_of_session(s.session_id)
        }
    finally:
        rt.close(grace_s=0)
    assert after == before and len(after) == 5


class RunsNext(RunsProjection):
    version = RunsProjection.version + 1


def test_a_version_bump_rebuilds_only_that_projection(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        workload(rt)
    finally:
        rt.close(grace_s=0)
    views = tmp_path / "views.db"
    conn = apsw.Connection(str(views))
    conn.execute("DELETE FROM runs")  # only a rebuild can bring these rows back
    conn.close()
    reader = JournalReader.open(tmp_path / "journal.db")
    head = reader.head().position
    from projections.projector import all_projections

    projections = [RunsNext() if p.name == "runs" else p for p in all_projections()]
    projector = Projector(reader, views, projections)
    assert projector.checkpoints()["runs"] == 0
    assert projector.checkpoints()["tape"] == head
    projector.catch_up()
    projector.close()
    reader.close()
    assert len(Views(views).runs_of_session(Views(views).sessions()[0].session_id)) == 1
    conn = apsw.Connection(str(views))
    assert conn.execute("SELECT count(*) FROM runs").get == 5
    version = conn.execute("SELECT version FROM projection_checkpoints WHERE name='runs'").get
    assert version == RunsProjection.version + 1
    conn.close()


def test_a_projector_moves_only_its_own_views_checkpoints(journal: Journal, views: Path) -> None:
    """A batch moves the checkpoints of the projector's views in one statement; a view in
    views.db that this projector does not fold keeps its own (it would skip events otherwise)."""

    def accepted() -> None:
        event = RunAccepted(run_id=f"r{journal.head().position}", session_id="s1", text="hi")
        journal.append("session/s1", [event], expected_seq=None, principal="user:a")

    accepted()
    both = Projector(journal, views, [RunsProjection(), UsageProjection()])
    both.catch_up()
    both.close()
    first = journal.head().position
    accepted()
    accepted()
    usage_only = Projector(journal, views, [UsageProjection()])
    usage_only.catch_up()
    usage_only.close()
    conn = apsw.Connection(str(views))
    try:
        rows = {
            str(name): int(position)
            for name, position in conn.execute("SELECT name, position FROM projection_checkpoints")
        }
    finally:
        conn.close()
    assert rows == {"runs": first, "usage": journal.head().position}
    assert first < journal.head().position


def test_reel_replay_reports_identical_then_differences(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        workload(rt)
    finally:
        rt.close(grace_s=0)
    ok = processes.run([REEL, "replay", "--data", str(tmp_path)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "views identical" in ok.stdout
    conn = apsw.Connection(str(tmp_path / "views.db"))
    conn.execute("UPDATE runs SET state = 'done' WHERE state = 'failed'")
    conn.close()
    bad = processes.run([REEL, "replay", "--data", str(tmp_path)], capture_output=True, text=True)
    assert bad.returncode == 1
    assert "1 difference:" in bad.stdout and "runs [" in bad.stdout
    assert '"state":"done"' in bad.stdout and '"state":"failed"' in bad.stdout


def test_reel_replay_refuses_a_tampered_journal(tmp_path: Path) -> None:
    rt = open_runtime(tmp_path, config=CONFIG)
    try:
        workload(rt)
    finally:
        rt.close(grace_s=0)
    conn = apsw.Connection(str(tmp_path / "journal.db"))
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute("UPDATE events SET principal = 'mallory' WHERE position = 3")
    conn.close()
    out = processes.run([REEL, "replay", "--data", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert "altered_envelope at position 3" in out.stdout


def test_reel_replay_without_views_is_a_clear_error(tmp_path: Path) -> None:
    out = processes.run([REEL, "replay", "--data", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "reel: error:" in out.stderr


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("REEL_") and name != "REEL_ALLOW_NO_BROWSER":
            monkeypatch.delenv(name, raising=False)


class _Outage:
    """The journal's reader, unreachable while ``down`` is set (a database restarting)."""

    def __init__(self, reader: Journal) -> None:
        self._reader = reader
        self.down = True

    def __getattr__(self, name: str) -> object:
        return getattr(self._reader, name)

    def read(self, **kwargs: int) -> object:
        if self.down:
            raise JournalUnavailable("cannot use the journal database db:5432/reel: refused")
        return self._reader.read(**kwargs)


def test_a_following_projector_outlives_an_unreachable_journal(
    journal: Journal, views: Path
) -> None:
    """Views stop, say why (what the watchdog's lag reads), and catch up once the journal is
    back: the error is gone with the outage, not kept for the node's life."""
    outage = _Outage(journal)
    projector = Projector(outage, views, [RunsProjection()])  # type: ignore[arg-type]
    try:
        event = RunAccepted(run_id="r1", session_id="s1", text="hi")
        journal.append("session/s1", [event], expected_seq=0, principal="user:a")
        projector.follow(journal)
        deadline = time.monotonic() + 10
        while projector.error is None:
            assert time.monotonic() < deadline, "the outage was never seen"
            time.sleep(0.01)
        assert isinstance(projector.error, JournalUnavailable)
        outage.down = False
        assert projector.wait_for(journal.head().position, 10) >= 1
        deadline = time.monotonic() + 10
        while projector.error is not None:
            assert time.monotonic() < deadline, f"still failing: {projector.error}"
            time.sleep(0.01)
    finally:
        projector.close()
