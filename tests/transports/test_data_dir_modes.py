"""The data dir is private: it holds the journal (every conversation), the views, the node's
signing key and the admin token. A node, and an offline command, create it 0700 and every file
reel makes in it 0600 (SQLite's -wal and -shm files take their database's mode), and tighten a
data dir an operator made wider, warning once, naming it. The workspace keeps its own mode."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from actors.messages import StartRun
from events import CheckpointKeyError
from tests import processes
from tests.transports.records import Records
from transports.config import NodeConfig
from transports.runtime import Runtime, open_runtime

REEL = Path(sys.executable).with_name("reel")
SIDE_FILES = {"journal.db-wal", "journal.db-shm", "views.db-wal", "views.db-shm"}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def open_files(data: Path) -> dict[str, int]:
    """Every regular file directly in ``data``, by name, with its mode."""
    return {p.name: mode(p) for p in data.iterdir() if p.is_file() and not p.is_symlink()}


def busy_node(data: Path) -> Runtime:
    """A node over ``data`` that has journaled and projected a run (so the WAL files exist)."""
    runtime = open_runtime(data, config=NodeConfig())
    runtime.node.ask(StartRun(text="hello", create=True))
    runtime.projector.wait_for(runtime.journal.committed_position, 30)
    return runtime


def warnings_naming(log: Records, data: Path) -> list[str]:
    return [
        r.getMessage()
        for r in log.records
        if r.levelno == logging.WARNING and str(data) in r.getMessage()
    ]


def test_a_new_data_dir_and_every_file_a_node_makes_in_it_are_private(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    with Records() as log:
        runtime = busy_node(data)
        try:
            files = open_files(data)
            assert set(files) >= SIDE_FILES, files  # the node is open: its WAL files exist
            assert {"journal.db", "views.db", "node.key", "admin.token"} <= set(files)
            assert {name: m for name, m in files.items() if m & 0o077} == {}
            assert mode(data) == 0o700
        finally:
            runtime.close(grace_s=0)
    assert {name: m for name, m in open_files(data).items() if m & 0o077} == {}
    assert warnings_naming(log, data) == []  # nothing to fix: nothing to say


def test_a_wider_data_dir_is_made_private_at_start_with_one_warning(tmp_path: Path) -> None:
    data = tmp_path / "data"
    busy_node(data).close(grace_s=0)
    os.chmod(data, 0o755)  # as an operator's mkdir, and files as an older reel left them
    for name in ("journal.db", "views.db", "admin.token"):
        os.chmod(data / name, 0o644)
    (data / "journal.db-wal").touch(mode=0o644)
    with Records() as log:
        runtime = open_runtime(data, config=NodeConfig())
        try:
            assert mode(data) == 0o700
            assert {name: m for name, m in open_files(data).items() if m & 0o077} == {}
        finally:
            runtime.close(grace_s=0)
    (warning,) = warnings_naming(log, data)
    assert "0755" in warning and "0700" in warning, warning
    with Records() as again:
        open_runtime(data, config=NodeConfig()).close(grace_s=0)
    assert warnings_naming(again, data) == []  # fixed once, quiet after


def test_the_workspace_keeps_its_own_mode(tmp_path: Path) -> None:
    """The shell sandbox binds the workspace: reel creates it 0700 and never changes it after
    (an operator who shares it with a tool user keeps that choice), nor its files."""
    data = tmp_path / "data"
    (data / "workspace").mkdir(parents=True)
    os.chmod(data / "workspace", 0o750)
    (data / "workspace" / "notes.txt").write_text("shared")
    os.chmod(data / "workspace" / "notes.txt", 0o644)
    open_runtime(data, config=NodeConfig()).close(grace_s=0)
    assert mode(data / "workspace") == 0o750
    assert mode(data / "workspace" / "notes.txt") == 0o644


def test_an_offline_command_makes_the_data_dir_and_its_files_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    os.chmod(data, 0o755)
    done = subprocess.run(
        [
            REEL,
            "tokens",
            "create",
            "--data",
            str(data),
            "--principal",
            "user:ci",
            "--role",
            "viewer",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert mode(data) == 0o700
    assert "journal.db" in open_files(data)  # the command made the journal
    assert {name: m for name, m in open_files(data).items() if m & 0o077} == {}
    assert str(data) in done.stderr and "0755" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_node_key_others_could_read_is_still_refused_not_tightened(tmp_path: Path) -> None:
    """The key may have been copied while it was readable: the node says so, as before, and
    leaves the decision (a new key, or a knowing chmod) to the operator."""
    data = tmp_path / "data"
    open_runtime(data, config=NodeConfig()).close(grace_s=0)
    os.chmod(data / "node.key", 0o644)
    with pytest.raises(CheckpointKeyError, match="it must be 600"):
        open_runtime(data, config=NodeConfig()).close(grace_s=0)
    assert mode(data / "node.key") == 0o644


def test_the_operator_s_config_keeps_its_mode(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.toml").write_text("[runs]\nmax_turns = 4\n")
    os.chmod(data / "config.toml", 0o644)
    with Records() as log:
        open_runtime(data).close(grace_s=0)
    assert mode(data / "config.toml") == 0o644
    assert warnings_naming(log, data) == []


@pytest.mark.parametrize("command", [("memory", "list"), ("tokens", "list"), ("node",)])
def test_a_dir_of_other_files_is_refused_and_left_as_it_was(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """``--data`` naming a dir of someone's files (a home, /tmp, mistyped) is refused in one
    line, exit 2, before anything in it changes: tightening it would take every file in it
    from the other users (this session's own /tmp was made 1700 so, once)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o1777)
    os.chmod(home, 0o1777)  # the umask may have narrowed it
    (home / ".profile").write_text("x")
    os.chmod(home / ".profile", 0o644)
    (home / "src").mkdir(mode=0o755)
    env = {**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    done = processes.run(
        [REEL, *command, "--data", str(home)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("reel: error: data dir ") and ".profile" in line, line
    assert mode(home) == 0o1777
    assert mode(home / ".profile") == 0o644
    assert sorted(p.name for p in home.iterdir()) == [".profile", "src"]


def test_a_dir_of_dirs_only_or_with_a_config_is_a_data_dir(tmp_path: Path) -> None:
    """A volume's root (``lost+found``) and a dir an operator made with its config in it are
    data dirs as before: the node opens them."""
    volume = tmp_path / "volume"
    (volume / "lost+found").mkdir(parents=True)
    open_runtime(volume, config=NodeConfig()).close(grace_s=0)
    assert "journal.db" in open_files(volume)
    configured = tmp_path / "configured"
    configured.mkdir()
    (configured / "config.toml").write_text("[runs]\nmax_turns = 4\n")
    (configured / "notes.txt").write_text("the operator's own")
    open_runtime(configured).close(grace_s=0)
    assert "journal.db" in open_files(configured)
