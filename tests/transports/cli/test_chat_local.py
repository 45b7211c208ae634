"""``reel chat --local``: one run in-process on a data dir, as the real console script."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from transports.cli.errors import EXIT_PENDING

REEL = Path(sys.executable).with_name("reel")
SHELL = '/tool shell.run {"argv": ["echo", "from-the-shell"]}'
RUN_LINE = re.compile(r"^run ([0-9A-Z]{26}) \(session ([0-9A-Z]{26})\)$", re.MULTILINE)


def chat(
    data: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return processes.run(
        [str(REEL), "chat", "--local", "--data", str(data), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=60,
    )


@pytest.fixture
def shell_data(data_dir: Path) -> Path:
    """A data dir whose config lets ``echo`` run through shell.run (after approval)."""
    (data_dir / "config.toml").write_text(
        '[tools]\nshell_allowlist = ["echo"]\n\n[approvals]\ntimeout_s = 5\n'
    )
    return data_dir


def assert_one_error_line(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("reel: error: ") and "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_message_prints_the_run_id_and_the_answer(data_dir: Path) -> None:
    done = chat(data_dir, "hello from the cli")
    assert done.returncode == 0, done
    match = RUN_LINE.search(done.stdout)
    assert match, done.stdout
    assert "hello from the cli\n" in done.stdout
    assert "run done (final_answer; 1 turn, 0 tool calls" in done.stdout
    # the session can be continued by id
    again = chat(data_dir, "--session", match.group(2), "second message")
    assert again.returncode == 0, again
    assert f"(session {match.group(2)})" in again.stdout


def test_a_tool_call_gets_its_own_lines(data_dir: Path) -> None:
    done = chat(data_dir, 'look\n/tool echo {"text": "x"}')
    assert done.returncode == 0, done
    assert '-> tool echo {"text":"x"}' in done.stdout
    assert "decision: allow [baseline.tool.low_risk]" in done.stdout
    assert '<- echo: {"text":"x"}' in done.stdout
    assert 'look\necho -> {"text":"x"}' in done.stdout


def test_approve_runs_the_shell_tool(shell_data: Path) -> None:
    done = chat(shell_data, "--approve", f"go\n{SHELL}")
    assert done.returncode == 0, done
    assert "approval: allow once by cli" in done.stdout
    assert "<- shell.run: " in done.stdout and "from-the-shell" in done.stdout
    assert "run done" in done.stdout


def test_deny_feeds_the_denial_back(shell_data: Path) -> None:
    done = chat(shell_data, "--deny", f"go\n{SHELL}")
    assert done.returncode == 0, done
    assert "approval: deny once by cli" in done.stdout
    assert "<- shell.run failed (denied)" in done.stdout
    assert "shell.run -> error (denied)" in done.stdout
    assert "run done" in done.stdout


def test_an_answer_at_the_prompt_decides(shell_data: Path) -> None:
    done = chat(shell_data, f"go\n{SHELL}", stdin="s\n")
    assert done.returncode == 0, done
    assert "allow shell.run?" in done.stdout
    assert "[s] session: shell.run with any arguments in this session" in done.stdout
    assert "[e] session: shell.run with these exact arguments" in done.stdout
    assert "approval: allow session by cli" in done.stdout
    assert "from-the-shell" in done.stdout


def test_end_of_input_at_the_prompt_is_no_decision(shell_data: Path) -> None:
    """A closed stdin (a cron job) answers nothing: the approval is left pending, exit 4, and
    it is decided later (here offline, by reel approvals)."""
    done = chat(shell_data, f"go\n{SHELL}", stdin="")
    assert done.returncode == EXIT_PENDING, done
    match = re.search(r"approval ([0-9A-Z]{26}) left pending: nobody answered", done.stdout)
    assert match, done.stdout
    assert "approval: deny" not in done.stdout
    listed = processes.run(
        [str(REEL), "approvals", "list", "--data", str(shell_data)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert match.group(1) in listed.stdout and "pending" in listed.stdout, listed
    approved = processes.run(
        [str(REEL), "approvals", "approve", match.group(1), "--data", str(shell_data)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert approved.returncode == 0, approved


def test_a_time_out_at_the_prompt_lets_the_run_go_on(shell_data: Path) -> None:
    """Nobody types, stdin stays open: the approval times out, chat drops its prompt and
    follows the run to its end (it used to wait on stdin for ever)."""
    (shell_data / "config.toml").write_text(
        '[tools]\nshell_allowlist = ["echo"]\n\n[approvals]\ntimeout_s = 1\n'
    )
    child = subprocess.Popen(
        [str(REEL), "chat", "--local", "--data", str(shell_data), f"go\n{SHELL}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        code = child.wait(60)
        assert child.stdout is not None and child.stderr is not None
        out, err = child.stdout.read(), child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
        assert child.stdin is not None
        child.stdin.close()
    assert code == 0, out + err
    assert "(decided elsewhere; no answer needed)" in out
    assert "approval: deny once by node" in out and "run done" in out


def test_a_failed_run_exits_1(data_dir: Path) -> None:
    done = chat(data_dir, "/fail x")
    assert done.returncode == 1, done
    assert "run failed (provider_error): x" in done.stdout


@pytest.mark.parametrize("message", ["", "   "])
def test_an_empty_message_is_one_error_line(data_dir: Path, message: str) -> None:
    assert_one_error_line(chat(data_dir, message), "text", "empty")


def test_an_unknown_session_is_one_error_line(data_dir: Path) -> None:
    assert_one_error_line(
        chat(data_dir, "--session", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "hi"), "no session"
    )


def test_conflicting_options_are_usage_errors(data_dir: Path) -> None:
    assert_one_error_line(chat(data_dir, "--approve", "--deny", "hi"), "--approve")
    assert_one_error_line(chat(data_dir, "--new", "--key", "k", "hi"), "--session")


def test_a_data_dir_held_by_a_node_is_refused_naming_the_pid(data_dir: Path) -> None:
    with processes.node(
        "--data",
        data_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # free ports: the shipped 8470/8471 may be another test's (another xdist worker's)
        env={**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"},
    ) as node:
        try:
            assert node.stderr is not None
            deadline = time.monotonic() + 30
            while True:
                line = node.stderr.readline()
                assert line and time.monotonic() < deadline, "reel node did not get ready"
                if json.loads(line).get("msg") == "reel node ready":
                    break
            assert_one_error_line(chat(data_dir, "hi"), str(node.pid))
        finally:
            node.send_signal(signal.SIGTERM)
            assert node.wait(30) == 0


def test_local_chat_continues_the_last_session_unless_new(data_dir: Path) -> None:
    first = chat(data_dir, "one")
    assert first.returncode == 0, first
    match = RUN_LINE.search(first.stdout)
    assert match and "continuing" not in first.stdout
    second = chat(data_dir, "two")
    assert second.returncode == 0, second
    assert second.stdout.startswith(
        f"continuing session {match[2]} (reel chat --new starts a new one)\n"
    )
    assert f"(session {match[2]})" in second.stdout
    fresh = chat(data_dir, "three", "--new")
    again = RUN_LINE.search(fresh.stdout)
    assert fresh.returncode == 0 and again and again[2] != match[2]
    (data_dir / "chat.session").write_text("01ARZ3NDEKTSV4RRFFQ69G5FAV\n")
    gone = chat(data_dir, "four")
    assert gone.returncode == 0, gone
    assert "session 01ARZ3NDEKTSV4RRFFQ69G5FAV is gone: starting a new one" in gone.stdout


def test_cancel_at_the_local_prompt_cancels_the_run(shell_data: Path) -> None:
    done = chat(shell_data, SHELL, "--new", stdin="/cancel\n")
    assert done.returncode == 1, done
    assert "/cancel: cancel the run" in done.stdout and "cancelling..." in done.stdout
    assert "run cancelled (" in done.stdout
