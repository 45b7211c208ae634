"""Every command that appends to a stopped node's journal checks it first, as ``reel node`` does.

The offline writers (``reel chat --local``, ``reel memory write|delete``, ``reel approvals
approve|deny|revoke``, ``reel sessions restore``, ``reel tasks cancel``, ``reel tokens
create|revoke``, ``reel learning accept|reject|rollback``) open the journal the node's way (its
key, its configured witness, the start-up check) and verify every row before they write: on a
journal the node refuses they exit 2 with the node's own line and append nothing, signed or
not, to the journal or the witness. A command that fails on an intact journal appends nothing
either: no checkpoint over the rows it found unsigned.

The journal: 131 events written by the real :class:`events.Journal` with checkpoint rows at 42,
83, 124 and 135, then one ``reel chat --local`` (checkpoint row 149), its witness outside the
data dir, and five rows after the last checkpoint (a node killed before its next checkpoint).
Tampering goes through raw SQLite (tests/events/journal_testkit.py), as an attacker holding the
data dir would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import apsw
import pytest
from cryptography.hazmat.primitives import serialization

from events import Journal, JournalReader
from events.catalog import RunOutput, SessionCreated
from events.codec import encode
from tests import processes
from tests.events.journal_testkit import (
    KEY,
    build_journal,
    fetch_row,
    replace_payload,
    reseal,
    tamper,
)

REEL = Path(sys.executable).with_name("reel")
UNKNOWN = "01J9ZQ6Y2W6S3B7R5X8K4M2N1P"

WRITERS: dict[str, list[str]] = {
    "chat-local": ["chat", "--local", "hello"],
    "memory-write": ["memory", "write", "the build server is ci-3"],
    "memory-delete": ["memory", "delete", UNKNOWN],
    "approvals-approve": ["approvals", "approve", UNKNOWN],
    "approvals-deny": ["approvals", "deny", UNKNOWN],
    "approvals-revoke": ["approvals", "revoke", "--principal", "user:alice", "--tool", "fs.read"],
    "sessions-restore": ["sessions", "restore", "s1", UNKNOWN],
    "tasks-cancel": ["tasks", "cancel", UNKNOWN],
    "tokens-create": ["tokens", "create", "--principal", "user:bob", "--role", "viewer"],
    "tokens-revoke": ["tokens", "revoke", UNKNOWN],
    "learning-accept": ["learning", "accept", UNKNOWN],
    "learning-reject": ["learning", "reject", UNKNOWN],
    "learning-rollback": ["learning", "rollback", UNKNOWN],
}
"""One invocation of each offline writer (each would succeed, or fail for its own reasons, on
an intact journal)."""

FAILING: dict[str, tuple[list[str], int]] = {
    "chat-local-unknown-session": (["chat", "--local", "--session", UNKNOWN, "hi"], 2),
    "memory-delete-unknown": (WRITERS["memory-delete"], 2),
    "approvals-approve-unknown": (WRITERS["approvals-approve"], 2),
    "approvals-deny-unknown": (WRITERS["approvals-deny"], 2),
    "approvals-revoke-no-grant": (WRITERS["approvals-revoke"], 1),
    "sessions-restore-unknown-session": (["sessions", "restore", UNKNOWN, UNKNOWN], 2),
    "sessions-restore-unknown-checkpoint": (WRITERS["sessions-restore"], 2),
    "tasks-cancel-unknown": (WRITERS["tasks-cancel"], 2),
    "tokens-revoke-unknown": (WRITERS["tokens-revoke"], 2),
    "learning-accept-unknown": (WRITERS["learning-accept"], 2),
}
"""Offline writers that fail on an intact journal, and their exit code."""


class Stopped(NamedTuple):
    """A stopped node's data dir and its witness (outside it)."""

    data: Path
    witness: Path


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Stopped:
    """Built once; each test works on a copy (:func:`stopped`)."""
    root = tmp_path_factory.mktemp("stopped")
    stopped = Stopped(root / "data", root / "witness.notes")
    build_journal(stopped.data, witness=stopped.witness)
    # A node ran on it since (its start-up work, post-run reflection, is done) and signed.
    ran = reel(stopped, "chat", "--local", "hello")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with Journal(stopped.data / "journal.db") as journal:  # no key: these rows stay unsigned
        for n in range(5):
            journal.append(
                f"session/tail{n}",
                [SessionCreated(session_id=f"tail{n}", session_key=f"k{n}", label="tail")],
                expected_seq=0,
                principal="user:alice",
            )
    return stopped


@pytest.fixture
def stopped(pristine: Stopped, tmp_path: Path) -> Stopped:
    """A private copy of the stopped node's data dir and witness."""
    copy = Stopped(tmp_path / "data", tmp_path / "outside" / "witness.notes")
    shutil.copytree(pristine.data, copy.data)
    copy.witness.parent.mkdir()
    shutil.copy2(pristine.witness, copy.witness)
    return copy


def reel(
    stopped: Stopped, *args: str, config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``reel ARGS --data DATA`` with the witness configured by REEL_JOURNAL_WITNESS, or by
    the config file ``config`` (REEL_CONFIG, as for a node run with ``--config`` elsewhere)."""
    env = {**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    env.pop("REEL_CONFIG", None)
    if config is None:
        env["REEL_JOURNAL_WITNESS"] = str(stopped.witness)
    else:
        env.pop("REEL_JOURNAL_WITNESS", None)
        env["REEL_CONFIG"] = str(config)
    return processes.run(
        [str(REEL), *args, "--data", str(stopped.data)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def rows(stopped: Stopped) -> list[tuple[int, bytes]]:
    """Every row's position and stored hash, read raw (a tampered journal reads too)."""
    conn = apsw.Connection(str(stopped.data / "journal.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            (int(p), bytes(h))
            for p, h in conn.execute("SELECT position, hash FROM events ORDER BY position")
        ]
    finally:
        conn.close()


def edit_row_90(conn: apsw.Connection) -> None:
    """Between the checkpoints at 83 and 124: only the full walk sees it."""
    payload = fetch_row(conn, 90)["payload"]
    assert isinstance(payload, bytes)
    conn.execute(
        "UPDATE events SET payload = ? WHERE position = 90",
        (payload[:-1] + bytes([payload[-1] ^ 1]),),
    )


def rewrite_and_sign_again(data: Path) -> Callable[[apsw.Connection], None]:
    """Someone holding the whole data dir (node.key too) rewrites row 57 onwards and signs
    every checkpoint again: only the witness tells."""

    def attack(conn: apsw.Connection) -> None:
        key = serialization.load_pem_private_key((data / KEY).read_bytes(), password=None)
        forged = encode(RunOutput(run_id="x", turn=0, text="history, rewritten"))
        replace_payload(conn, 57, forged, "run.output")
        reseal(conn, 57, resign=key)

    return attack


def normalized(line: str, stopped: Stopped) -> str:
    return line.replace(str(stopped.data), "DATA").replace(str(stopped.witness), "WITNESS")


def node_line(stopped: Stopped) -> str:
    """What ``reel node`` says about this data dir (exit 2, its last line)."""
    done = reel(stopped, "node")
    assert done.returncode == 2, done.stdout + done.stderr
    return normalized(done.stderr.strip().splitlines()[-1], stopped)


class Attack(NamedTuple):
    make: Callable[[Path], Callable[[apsw.Connection], None]]
    kind: str
    position: int


ATTACKS = {
    "edited-between-checkpoints": Attack(lambda _data: edit_row_90, "altered_payload", 90),
    "rewritten-and-signed-again": Attack(rewrite_and_sign_again, "rewritten_chain", 82),
}


@pytest.fixture(scope="module", params=list(ATTACKS))
def refused(
    request: pytest.FixtureRequest, pristine: Stopped, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Attack, str]:
    """An attack and the line ``reel node`` refuses the journal with (run once per attack)."""
    attack = ATTACKS[request.param]
    root = tmp_path_factory.mktemp("node")
    copy = Stopped(root / "data", root / "witness.notes")
    shutil.copytree(pristine.data, copy.data)
    shutil.copy2(pristine.witness, copy.witness)
    with tamper(copy.data / "journal.db") as conn:
        attack.make(copy.data)(conn)
    line = node_line(copy)
    assert f"position {attack.position} ({attack.kind}" in line, line
    return attack, line


@pytest.mark.parametrize("args", list(WRITERS.values()), ids=list(WRITERS))
def test_a_writer_refuses_a_journal_the_node_refuses(
    stopped: Stopped, refused: tuple[Attack, str], args: list[str]
) -> None:
    attack, line = refused
    with tamper(stopped.data / "journal.db") as conn:
        attack.make(stopped.data)(conn)
    before, witnessed = rows(stopped), stopped.witness.read_bytes()
    done = reel(stopped, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (said,) = done.stderr.strip().splitlines()
    assert normalized(said, stopped) == line
    assert rows(stopped) == before, "appended to a journal the node refuses"
    assert stopped.witness.read_bytes() == witnessed, "witnessed a checkpoint over it"


@pytest.mark.parametrize("args", [WRITERS["memory-write"], WRITERS["chat-local"]])
def test_the_witness_of_a_config_elsewhere_is_checked_too(
    stopped: Stopped, tmp_path: Path, args: list[str]
) -> None:
    """The node runs with ``--config /etc/...``; the offline commands find its witness through
    REEL_CONFIG, so a rewrite only the witness tells is refused there too."""
    config = tmp_path / "etc" / "reel.toml"
    config.parent.mkdir()
    config.write_text(f'[journal]\nwitness = "{stopped.witness}"\n')
    with tamper(stopped.data / "journal.db") as conn:
        rewrite_and_sign_again(stopped.data)(conn)
    before, witnessed = rows(stopped), stopped.witness.read_bytes()
    done = reel(stopped, *args, config=config)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "position 82 (rewritten_chain" in done.stderr and "Traceback" not in done.stderr
    assert rows(stopped) == before and stopped.witness.read_bytes() == witnessed
    missing = reel(stopped, *args, config=tmp_path / "nowhere.toml")
    assert missing.returncode == 2 and "REEL_CONFIG" in missing.stderr, missing.stderr
    assert rows(stopped) == before


@pytest.mark.parametrize(("args", "code"), list(FAILING.values()), ids=list(FAILING))
def test_a_writer_that_fails_appends_nothing(stopped: Stopped, args: list[str], code: int) -> None:
    before, witnessed = rows(stopped), stopped.witness.read_bytes()
    done = reel(stopped, *args)
    assert done.returncode == code, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert rows(stopped) == before, "a failed command appended (a checkpoint?)"
    assert stopped.witness.read_bytes() == witnessed


def test_a_writer_that_succeeds_signs_what_it_checked(stopped: Stopped) -> None:
    """On an intact journal the write happens and is signed (the rows it found unsigned
    with it) and witnessed: the check does not stop honest work."""
    before, witnessed = rows(stopped), stopped.witness.read_bytes()
    done = reel(stopped, *WRITERS["memory-write"])
    assert done.returncode == 0, done.stdout + done.stderr
    after = rows(stopped)
    assert after[: len(before)] == before and len(after) == len(before) + 2
    reader = JournalReader.open(stopped.data / "journal.db")
    try:
        last = reader.last_checkpoint()
        assert last is not None and last.row_position == len(after)
    finally:
        reader.close()
    grown = stopped.witness.read_bytes()
    assert grown.startswith(witnessed) and len(grown) > len(witnessed)
