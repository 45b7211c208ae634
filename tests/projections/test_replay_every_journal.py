"""`reel replay` on every kind of journal, as an operator runs it: the real console script on
data dirs that the real CLI (or, for what the CLI has no command for, an in-process node) wrote.

Each activity alone, then a big mixed journal, must replay "identical" with exit 0 (never an
internal error); a views row altered behind the projector's back must be reported as exactly
that row, with exit 1. Regression: replay used to crash (``ExecutionCompleteError``) on any view
table with no rows, i.e. on nearly every real data dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from actors.messages import CancelRun, ResetSession, ResolveApproval, StartRun
from events import JournalReader
from tests import processes
from tests.events.journal_testkit import all_events
from tests.projections.test_projections import CONFIG, pending_approval, wait_run
from transports.runtime import open_runtime

REEL = str(Path(sys.executable).with_name("reel"))
SHELL_TOML = '[tools]\nshell_allowlist = ["echo"]\n'
SHELL = '/tool shell.run {"argv": ["echo", "hi"]}'
IDENTICAL = "views identical to a replay from position 0"


def reel(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [REEL, *args, "--data", str(data)], capture_output=True, text=True, timeout=60
    )


def chat(data: Path, *args: str) -> str:
    """``reel chat --local ...``: the run must finish (exit 0); returns its output."""
    done = reel(data, "chat", "--local", *args)
    assert done.returncode == 0, done
    return done.stdout


def assert_identical(data: Path) -> str:
    """``reel replay`` says identical and exits 0; returns its output."""
    done = reel(data, "replay")
    assert "internal error" not in done.stderr, done.stderr
    assert done.returncode == 0, done
    assert done.stdout.startswith("journal intact: "), done.stdout
    assert IDENTICAL in done.stdout, done.stdout
    return done.stdout


def kinds(data: Path) -> set[str]:
    reader = JournalReader.open(data / "journal.db")
    try:
        return {e.kind for e in all_events(reader)}
    finally:
        reader.close()


# --- the activities: each writes one kind of journal and returns the event kinds it must hold --


def fresh(data: Path) -> set[str]:
    """A node started and stopped with nothing done: an empty journal, views with no rows."""
    open_runtime(data).close(grace_s=0)
    assert kinds(data) == set() and (data / "views.db").exists()
    return set()


def one_run(data: Path) -> set[str]:
    assert "run done (final_answer" in chat(data, "--new", "hello")
    return {"session.created", "run.accepted", "run.completed"}


def tool_allowed(data: Path) -> set[str]:
    out = chat(data, "--new", 'hi\n/tool echo {"text": "hi"}')
    assert "decision: allow" in out
    return {"tool.proposed", "tool.decided", "tool.completed", "run.completed"}


def tool_denied_by_policy(data: Path) -> set[str]:
    (data / "config.toml").write_text('[tools]\npostures = { "echo" = "disabled" }\n')
    out = chat(data, "--new", 'hi\n/tool echo {"text": "hi"}')
    assert "decision: deny" in out
    return {"tool.decided", "tool.completed", "run.completed"}


def tool_denied_at_the_prompt(data: Path) -> set[str]:
    (data / "config.toml").write_text(SHELL_TOML)
    out = chat(data, "--new", "--deny", f"go\n{SHELL}")
    assert "approval: deny" in out
    return {"tool.approval_requested", "tool.approval_resolved", "run.completed"}


def waiting_for_approval(data: Path) -> str:
    """A run left waiting for a human by a node that stopped: returns its approval id."""
    rt = open_runtime(data, config=CONFIG)
    try:
        ticket = rt.node.ask(StartRun(text=SHELL, create=True))
        return pending_approval(rt, ticket.run_id)
    finally:
        rt.close(grace_s=0)


def finish_runs(data: Path) -> None:
    """Start the node again and let every run it resumes finish."""
    rt = open_runtime(data, config=CONFIG)
    try:
        for record in [
            r for s in rt.views.sessions() for r in rt.views.runs_of_session(s.session_id)
        ]:
            wait_run(rt, record.run_id)
    finally:
        rt.close(grace_s=0)


def decided_offline(decision: str) -> Callable[[Path], set[str]]:
    def activity(data: Path) -> set[str]:
        approval_id = waiting_for_approval(data)
        decided = reel(data, "approvals", decision, approval_id)
        assert decided.returncode == 0, decided
        # The decision is in the journal but not yet in views.db (no node folded it): replay
        # compares at the views' position and says how far behind they are.
        out = assert_identical(data)
        assert "the live views stop at position" in out
        finish_runs(data)
        approval = json.loads(reel(data, "approvals", "list", "--all", "--json").stdout)[0]
        assert approval["decision"] == ("allow" if decision == "approve" else "deny")
        return {"tool.approval_resolved", "run.resumed", "tool.completed", "run.completed"}

    return activity


def session_reset(data: Path) -> set[str]:
    rt = open_runtime(data, config=CONFIG)
    try:
        ticket = rt.node.ask(StartRun(text="before the reset", create=True))
        wait_run(rt, ticket.run_id)
        rt.node.ask(ResetSession(session_id=ticket.session_id))
        after = rt.node.ask(StartRun(text="after the reset", session_id=ticket.session_id))
        wait_run(rt, after.run_id)
    finally:
        rt.close(grace_s=0)
    return {"session.reset"}


def session_posture_set(data: Path) -> set[str]:
    out = chat(
        data, "--new", "--posture", "echo=ask_each_time", "--approve", '/tool echo {"text": "hi"}'
    )
    assert "approval: allow once" in out
    return {"session.posture_set", "tool.approval_resolved"}


def always_grant_revoked(data: Path) -> set[str]:
    rt = open_runtime(data, config=CONFIG)
    try:
        ticket = rt.node.ask(StartRun(text=SHELL, create=True, principal="ops"))
        approval_id = pending_approval(rt, ticket.run_id)
        rt.node.ask(ResolveApproval(approval_id=approval_id, decision="allow", scope="always"))
        wait_run(rt, ticket.run_id)
    finally:
        rt.close(grace_s=0)
    revoked = reel(data, "approvals", "revoke", "--principal", "ops", "--tool", "shell.run")
    assert revoked.returncode == 0, revoked
    return {"grant.revoked"}


def cancelled_run(data: Path) -> set[str]:
    rt = open_runtime(data, config=CONFIG)
    try:
        ticket = rt.node.ask(StartRun(text="/sleep 20000", create=True))
        wait_run(rt, ticket.run_id, {"in_progress"})
        rt.node.ask(CancelRun(run_id=ticket.run_id))
        assert wait_run(rt, ticket.run_id) == "cancelled"
    finally:
        rt.close(grace_s=0)
    return {"run.cancelled"}


ACTIVITIES: dict[str, Callable[[Path], set[str]]] = {
    "fresh": fresh,
    "one_run": one_run,
    "tool_allowed": tool_allowed,
    "tool_denied_by_policy": tool_denied_by_policy,
    "tool_denied_at_the_prompt": tool_denied_at_the_prompt,
    "approved_offline": decided_offline("approve"),
    "denied_offline": decided_offline("deny"),
    "session_reset": session_reset,
    "session_posture_set": session_posture_set,
    "always_grant_revoked": always_grant_revoked,
    "cancelled_run": cancelled_run,
}


@pytest.mark.parametrize("name", list(ACTIVITIES))
def test_each_activity_alone_replays_identical(data_dir: Path, name: str) -> None:
    expected = ACTIVITIES[name](data_dir)
    assert expected <= kinds(data_dir)  # the activity really wrote what it stands for
    assert_identical(data_dir)


def test_the_reported_regression_one_local_chat(data_dir: Path) -> None:
    chat(data_dir, "hello")
    out = assert_identical(data_dir)
    reader = JournalReader.open(data_dir / "journal.db")
    try:
        rows = list(all_events(reader))
    finally:
        reader.close()
    # 7 events, the run's reflection task (enqueued, claimed, succeeded), the final checkpoint:
    # the node's views end at the head the journal closed with (nothing appended after them)
    assert [r.kind for r in rows][-4:] == [
        "task.enqueued",
        "task.claimed",
        "task.succeeded",
        "journal.checkpoint",
    ]
    assert "replayed 11 events to position 11" in out


MIX = (
    "plain {i}",
    'with a tool {i}\n/tool echo {{"text": "{i}"}}',
    'two tools {i}\n/tool time.now {{}}\n/tool echo {{"text": "{i}"}}',
    "bad arguments {i}\n/tool echo {{}}",
    "/fail provider down {i}",
)


def test_a_big_mixed_journal_replays_identical(data_dir: Path) -> None:
    """400 runs over 20 sessions (queued behind each other), with tools, invalid arguments,
    provider failures and a few session resets, as one node writes them concurrently."""
    runs, sessions = 400, 20
    rt = open_runtime(data_dir, config=CONFIG)
    try:
        opened = [rt.node.ask(StartRun(text="open", create=True)) for _ in range(sessions)]
        tickets = list(opened)
        for i in range(runs - sessions):
            session = opened[i % sessions].session_id
            if i % 97 == 0:
                rt.node.ask(ResetSession(session_id=session))
            text = MIX[i % len(MIX)].format(i=i)
            tickets.append(rt.node.ask(StartRun(text=text, session_id=session)))
        states = {wait_run(rt, t.run_id, timeout=60) for t in tickets}
    finally:
        rt.close(grace_s=0)
    assert states == {"done", "failed"}
    assert {"session.reset", "tool.completed", "run.failed"} <= kinds(data_dir)
    out = assert_identical(data_dir)
    assert "stop at position" not in out
    done = reel(data_dir, "replay", "--json")
    assert done.returncode == 0, done
    report = json.loads(done.stdout)["replay"]
    assert report["differences"] == [] and report["live"] is True
    assert report["position"] == report["head"] == report["events"] > runs * 5


def test_an_altered_views_row_is_reported_as_that_row(data_dir: Path) -> None:
    chat(data_dir, "--new", 'hi\n/tool echo {"text": "hi"}')
    conn = apsw.Connection(str(data_dir / "views.db"))
    run_id = conn.execute("SELECT run_id FROM runs").get
    conn.execute("UPDATE runs SET state = 'failed' WHERE run_id = ?", (run_id,))
    conn.execute("DELETE FROM tool_usage")
    conn.close()
    done = reel(data_dir, "replay")
    assert done.returncode == 1, done
    assert "internal error" not in done.stderr
    assert "2 differences:" in done.stdout
    assert f"runs [{run_id}]" in done.stdout
    assert '"state":"failed"' in done.stdout and '"state":"done"' in done.stdout
    assert "tool_usage [echo]\n    live:     None\n    replayed: {" in done.stdout


def test_views_of_another_projection_version_are_a_difference(data_dir: Path) -> None:
    chat(data_dir, "--new", "hello")
    conn = apsw.Connection(str(data_dir / "views.db"))
    conn.execute("UPDATE projection_checkpoints SET version = version + 1 WHERE name = 'runs'")
    conn.close()
    done = reel(data_dir, "replay")
    assert done.returncode == 1, done
    assert "1 difference:" in done.stdout and "projection_checkpoints [runs]" in done.stdout


def test_a_data_dir_without_views_is_rebuilt_and_says_nothing_was_compared(
    data_dir: Path,
) -> None:
    chat(data_dir, "--new", 'hi\n/tool echo {"text": "hi"}')
    for name in ("views.db", "views.db-wal", "views.db-shm"):
        (data_dir / name).unlink(missing_ok=True)
    done = reel(data_dir, "replay")
    assert done.returncode == 0, done
    assert "no live views at" in done.stdout and "rebuilt from the journal alone" in done.stdout
    assert IDENTICAL not in done.stdout
    assert not (data_dir / "views.db").exists()  # an audit writes nothing into the data dir


def test_a_data_dir_without_a_journal_is_one_error_line(data_dir: Path) -> None:
    # Nothing to audit: a mistyped --data must not pass as an identical replay.
    done = reel(data_dir / "typo", "replay")
    assert done.returncode == 2, done
    journal = data_dir / "typo" / "journal.db"
    assert done.stderr == f"reel: error: no journal at {journal}: nothing to replay\n"


@pytest.fixture(autouse=True)
def _no_stray_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("REEL_"):
            monkeypatch.delenv(name, raising=False)
