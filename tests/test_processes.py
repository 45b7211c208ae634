"""tests/processes.py: a process started under :func:`spawned` does not outlive its block, even
when the test fails before the process said it was ready, and even when it ignores SIGINT; a
``reel`` command line run by :func:`run` (a forked child of tests/zygote.py) answers as a
spawned one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import processes
from tests.events.journal_testkit import build_journal

SILENT = "import time; time.sleep(120)"
"""A child that never prints a ready line (a node hanging at start)."""
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN);"
    " print('up', flush=True); time.sleep(120)"
)
"""A child that ignores Ctrl-C's SIGINT (a node stuck in its drain)."""


def test_a_child_that_never_got_ready_is_stopped_when_the_test_fails() -> None:
    with (
        pytest.raises(AssertionError, match="no ready line"),
        processes.spawned([sys.executable, "-c", SILENT], stdout=subprocess.PIPE) as child,
    ):
        raise AssertionError("no ready line")
    assert child.poll() is not None


def test_a_child_that_ignores_sigint_is_killed_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(processes, "GRACE_S", 0.5)
    with processes.spawned(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
    assert child.returncode == -9


def test_stop_fails_the_test_rather_than_hang_on_a_child_that_will_not_stop() -> None:
    with processes.spawned(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "up\n"
        with pytest.raises(AssertionError, match=r"did not stop within 0\.5 s"):
            processes.stop(child, timeout=0.5)
        assert child.returncode == -9


def untimed(text: str) -> str:
    """``text`` without ``journal verify``'s line of seconds."""
    return re.sub(r"(?m)^  time .*$", "", text)


def test_a_forked_reel_answers_as_a_spawned_one(tmp_path: Path) -> None:
    """The same command lines through :func:`processes.run` and a plain ``subprocess.run``:
    the same exit codes, output and error lines, its environment and directory its own."""
    data = tmp_path / "data"
    build_journal(data, runs=1)
    lines = (
        ["--version"],
        ["journal", "verify", "--data", str(data)],
        ["tokens", "list", "--data", str(data), "--json"],
        ["no-such-command"],
        ["journal", "verify"],  # REEL_DATA from the environment, relative to the directory
    )
    env = {**os.environ, "REEL_DATA": "data"}
    for argv in lines:
        forked = processes.run(
            [processes.REEL, *argv], capture_output=True, text=True, env=env, cwd=tmp_path
        )
        spawned = subprocess.run(
            [processes.REEL, *argv], capture_output=True, text=True, env=env, cwd=tmp_path
        )
        assert (forked.returncode, untimed(forked.stdout), forked.stderr) == (
            spawned.returncode,
            untimed(spawned.stdout),
            spawned.stderr,
        ), argv
    assert (
        processes.run([processes.REEL, "journal", "verify"], env=env, cwd=tmp_path).returncode == 0
    )
    if not os.environ.get(processes.ALWAYS_SPAWN):  # the forks were the zygote's
        forks = processes._Forks._one
        assert forks is not None and forks.server.poll() is None
    # Streams given other ways: an empty stdin pipe, stderr into stdout, bytes.
    vault_set = [str(processes.REEL), "vault", "set", "api_key", "--data", str(data)]
    forked_b = processes.run(
        vault_set, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    spawned_b = subprocess.run(
        vault_set, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert (forked_b.returncode, forked_b.stdout) == (spawned_b.returncode, spawned_b.stdout)
    assert forked_b.returncode == 2 and b"is 0 characters" in forked_b.stdout


def interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def running_in(directory: Path) -> list[int]:
    """The processes whose working directory is ``directory`` (gone once reaped)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cwd").readlink() == directory:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_forked_reel_reads_its_input_and_is_killed_at_its_timeout(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build_journal(data, runs=1)
    vault_set = [str(processes.REEL), "vault", "set", "api_key", "--data", str(data)]
    short = processes.run(vault_set, input="", capture_output=True, text=True)
    assert short.returncode == 2 and "is 0 characters" in short.stderr
    done = processes.run(vault_set, input="s3cret-value\n", capture_output=True, text=True)
    assert done.returncode == 0 and "revision 1" in done.stdout, done
    listed = subprocess.run(
        [processes.REEL, "vault", "list", "--data", str(data)], capture_output=True, text=True
    )
    assert "api_key" in listed.stdout, listed
    waiting = tmp_path / "waiting"  # the directory the waiting command alone runs in
    waiting.mkdir()
    read, write = os.pipe()  # a secret that never ends: the command reads on
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            processes.run(
                vault_set,
                stdin=read,
                stdout=subprocess.DEVNULL,
                cwd=waiting,
                timeout=2,
            )
        assert not running_in(waiting)  # killed, not left waiting
        signal.signal(signal.SIGALRM, interrupt)
        signal.setitimer(signal.ITIMER_REAL, 2)
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C, or pytest-timeout, during the wait
            processes.run(
                vault_set,
                stdin=read,
                stdout=subprocess.DEVNULL,
                cwd=waiting,
            )
        if os.environ.get(processes.ALWAYS_SPAWN):
            # Plain subprocess.run kills the child on Ctrl-C and re-raises without reaping it
            # (CPython's choice, bpo-25942): it is gone a moment later, not at once.
            deadline = time.monotonic() + 5
            while running_in(waiting) and time.monotonic() < deadline:
                time.sleep(0.01)
        assert not running_in(waiting)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        os.close(read)
        os.close(write)
    with pytest.raises(subprocess.CalledProcessError) as failed:
        processes.run([processes.REEL, "no-such-command"], check=True, capture_output=True)
    assert failed.value.returncode == 2 and b"no-such-command" in failed.value.stderr


def test_an_environment_read_at_import_gets_a_plain_process(tmp_path: Path) -> None:
    """``PYTHONPATH`` is read when the interpreter starts: a command line that sets it runs in
    an interpreter that read it, not in a child of one that did not."""
    (tmp_path / "sitecustomize.py").write_text("print('site read', flush=True)\n")
    done = processes.run(
        [processes.REEL, "--version"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0 and done.stdout.startswith("site read\n"), done
