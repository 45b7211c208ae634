"""What an offline command loads: the journal, checked the node's way
(:mod:`transports.journal_open`), and never the node's whole composition
(:mod:`transports.runtime`, a third of a second of every such command's start, which the suite's
hundreds of commands paid too). Only ``reel chat --local`` opens a node. A client command (one
that asks a running node) does not even read the node's config schema
(:mod:`transports.config`, 0.15 s: ``reel tokens list``'s target is 0.3 s in all)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.processes import REEL
from tests.transports.cli.nodekit import environment, running_node

COMMAND = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules))))
from transports.cli.main import main
sys.argv = ["reel", *sys.argv[1:]]
main()
"""


def modules_of(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", COMMAND, *args],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=60,
    )
    return done, set(json.loads(done.stdout.splitlines()[-1]))


def test_an_offline_writer_opens_the_journal_without_the_composition(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    done, modules = modules_of(
        "tokens", "create", "--principal", "user:alice", "--role", "viewer", "--data", str(data)
    )
    assert done.returncode == 0, done.stderr
    assert (data / "journal.db").exists()  # it did write, through the node's journal opening
    assert "transports.journal_open" in modules
    assert "transports.runtime" not in modules


def test_chat_local_is_the_offline_command_that_opens_a_node(tmp_path: Path) -> None:
    """The check itself: the composition is in ``sys.modules`` when a command does use it."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    done, modules = modules_of("chat", "--local", "--data", str(data), "hello")
    assert done.returncode == 0, done.stderr
    assert "transports.runtime" in modules


def test_a_client_command_loads_no_config_schema(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_node([str(REEL), "node", "--data", str(data)]):
        done, modules = modules_of("tokens", "list", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert "admin" in done.stdout  # it asked the node: the admin token is listed
    assert "transports.node.private_dir" in modules  # its data dir was checked
    assert "transports.config" not in modules
    assert "transports.runtime" not in modules
