"""``reel journal verify|pubkey|head|tail|export``, run as the real console script in a
subprocess. The journal: 20 events and 2 checkpoint rows (13 and 22, the head)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from events import Journal, JournalReader, NodeKey, load_public_key
from events.catalog import RunAccepted, RunCompleted, RunOutput, ToolProposed
from events.note import verifier_key
from tests import processes

REEL = Path(sys.executable).with_name("reel")
SECRET = "ghp_R2d2C3poBb8Ee7Yy6Uu5Ii4Oo3Pp2Qq1Ww0X"


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
    assert lines[0].startswith("reel: error: ")
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0]


def fill(data: Path, runs: int = 5) -> NodeKey:
    key = NodeKey.load_or_create(data / "node.key")
    with Journal(data / "journal.db", node_key=key, checkpoint_every_events=10) as journal:
        for r in range(runs):
            journal.append(
                f"run/{r}",
                [
                    RunAccepted(run_id=str(r), session_id="s", text=f"use {SECRET} please"),
                    RunOutput(run_id=str(r), turn=0, text="working"),
                    ToolProposed(
                        invocation_id=f"t{r}",
                        run_id=str(r),
                        session_id="s",
                        call_id="c",
                        tool="http.fetch",
                        arguments={"headers": {"Authorization": "Bearer abcdefgh1234"}},
                    ),
                    RunCompleted(run_id=str(r), answer=f"answer {r}"),
                ],
                expected_seq=0,
            )
    return key


@pytest.fixture
def data(data_dir: Path) -> Path:
    fill(data_dir)
    return data_dir


def tamper(data: Path, sql: str, *args: object) -> None:
    conn = apsw.Connection(str(data / "journal.db"))
    conn.execute("DROP TRIGGER events_append_only_update")
    conn.execute(sql, args)
    conn.close()


def tamper_payload(data: Path, position: int) -> None:
    """Flip one bit of the stored payload at ``position`` (it stays a blob)."""
    conn = apsw.Connection(str(data / "journal.db"))
    (payload,) = conn.execute(
        "SELECT payload FROM events WHERE position = ?", (position,)
    ).fetchall()[0]
    conn.close()
    assert isinstance(payload, bytes)
    tamper(
        data,
        "UPDATE events SET payload = ? WHERE position = ?",
        payload[:-1] + bytes([payload[-1] ^ 1]),
        position,
    )


def pin(data: Path, tmp_path: Path) -> Path:
    """What an auditor does once: keep the node's public key where the data dir cannot reach."""
    done = reel("journal", "pubkey", "--data", str(data))
    assert done.returncode == 0, done.stderr
    path = tmp_path / "node.pub"
    path.write_text(done.stdout)
    return path


def test_verify_intact(data: Path, tmp_path: Path) -> None:
    done = reel("journal", "verify", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert "intact but UNANCHORED" in done.stdout
    assert "events       22" in done.stdout
    assert "checkpoints  2, the last at row 22 covering 1..21" in done.stdout
    assert "NOT PINNED" in done.stdout
    assert done.stderr == ""
    pinned = reel(
        "journal", "verify", "--data", str(data), "--public-key", str(pin(data, tmp_path))
    )
    assert pinned.returncode == 0, pinned.stderr
    assert "intact, anchored by pinned key" in pinned.stdout
    assert "UNANCHORED" not in pinned.stdout


def test_pubkey(data: Path, tmp_path: Path) -> None:
    key = NodeKey.load(data / "node.key")
    done = reel("journal", "pubkey", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert done.stdout == key.public_pem()
    assert done.stdout.startswith("-----BEGIN PUBLIC KEY-----\n")
    assert "PRIVATE" not in done.stdout
    assert load_public_key(pin(data, tmp_path)) == key.public_key
    vkey = reel("journal", "pubkey", "--data", str(data), "--vkey")
    assert vkey.returncode == 0
    assert vkey.stdout.strip() == verifier_key(key.origin, key.public_key)
    as_file = tmp_path / "node.vkey"
    as_file.write_text(vkey.stdout)
    again = reel("journal", "verify", "--data", str(data), "--public-key", str(as_file))
    assert again.returncode == 0 and "anchored by pinned key" in again.stdout


def test_verify_with_another_key_fails(data: Path, tmp_path: Path) -> None:
    other = NodeKey.load_or_create(tmp_path / "other.key")
    wrong = tmp_path / "other.pub"
    wrong.write_text(other.public_pem())
    done = reel("journal", "verify", "--data", str(data), "--public-key", str(wrong), "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    fault = json.loads(done.stdout)["fault"]
    assert (fault["kind"], fault["position"]) == ("bad_checkpoint_signature", 13)
    assert "another key" in fault["message"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "cannot read public key"),
        (b"not a key", "not a PEM public key"),
        (b"-----BEGIN PRIVATE KEY-----\nabc\n-----END PRIVATE KEY-----\n", "private key"),
        (b"name+01020304+AAAA", "not an Ed25519 signed-note verifier key"),
    ],
)
def test_unusable_public_key_file(
    data: Path, tmp_path: Path, content: bytes | None, words: str
) -> None:
    path = tmp_path / "key.pub"
    if content is not None:
        path.write_bytes(content)
    done = reel("journal", "verify", "--data", str(data), "--public-key", str(path))
    assert_one_error_line(done, words, str(path))


def test_unusable_witness_file(data: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope.notes"
    assert_one_error_line(
        reel("journal", "verify", "--data", str(data), "--witness", str(missing)),
        "cannot read witness",
    )
    garbage = tmp_path / "garbage.notes"
    garbage.write_text("hello\n\nworld\n\n")
    assert_one_error_line(
        reel("journal", "verify", "--data", str(data), "--witness", str(garbage)),
        "entry 1 is not a checkpoint note",
    )


def test_verify_tampered(data: Path) -> None:
    tamper_payload(data, 13)
    done = reel("journal", "verify", "--data", str(data))
    assert done.returncode == 1, done.stderr
    assert "TAMPERED" in done.stdout
    assert "altered_payload at position 13" in done.stdout
    assert "verified     12 events before the fault" in done.stdout
    done = reel("journal", "verify", "--data", str(data), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert (report["fault"]["kind"], report["fault"]["position"]) == ("altered_payload", 13)


def test_row_that_cannot_be_read(data: Path) -> None:
    # ``||`` makes TEXT: the principal column now holds bytes that are not UTF-8.
    tamper(data, "UPDATE events SET principal = CAST(x'ff00' AS TEXT) WHERE position = 9")
    done = reel("journal", "verify", "--data", str(data))
    assert done.returncode == 1, done.stderr
    assert "unreadable at position 9" in done.stdout
    assert_one_error_line(reel("journal", "export", "--data", str(data)), "position 8")


def test_verify_json(data: Path) -> None:
    done = reel("journal", "verify", "--data", str(data), "--json")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert (report["ok"], report["fault"], report["events"]) == (True, None, 22)
    assert (report["key_trusted"], report["anchored"], report["anchor"]) == (
        False,
        False,
        "unanchored",
    )
    assert report["public_key"] == NodeKey.load(data / "node.key").public_key.hex()
    assert report["key_source"] == "embedded"


def test_verify_json_calls_pinned_only_the_key_the_caller_gave(data: Path, tmp_path: Path) -> None:
    pinned = reel(
        "journal", "verify", "--data", str(data), "--json", "--public-key", str(pin(data, tmp_path))
    )
    assert pinned.returncode == 0, pinned.stderr
    report = json.loads(pinned.stdout)
    assert (report["key_source"], report["key_trusted"]) == ("pinned", True)
    assert (report["anchored"], report["anchor"]) == (True, "pinned key")


def test_head(data: Path) -> None:
    reader = JournalReader.open(data / "journal.db")
    head = reader.head()
    reader.close()
    done = reel("journal", "head", "--data", str(data))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["position", "22", "hash", head.hash.hex()]
    as_json = json.loads(reel("journal", "head", "--data", str(data), "--json").stdout)
    assert as_json == {"position": 22, "hash": head.hash.hex()}


def test_tail_prints_decoded_redacted_events(data: Path) -> None:
    done = reel("journal", "tail", "-n", "4", "--data", str(data))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4
    assert [line.split()[0] for line in lines] == ["19", "20", "21", "22"]
    assert lines[0].split()[2] == "system"  # who caused it (this fixture appends as system)
    assert "run/4#1" in lines[0] and '"working"' in lines[0]
    assert '"Authorization":"[REDACTED]"' in lines[1]
    assert '"answer":"answer 4"' in lines[2]
    assert "journal#1" in lines[3] and '"size":21' in lines[3]  # the checkpoint at close
    # More lines than the journal has: all of it.
    done = reel("journal", "tail", "-n", "500", "--json", "--data", str(data))
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["position"] for r in records] == list(range(1, 23))
    assert records[0]["event"]["text"] == "use [REDACTED] please"
    assert SECRET not in done.stdout
    assert "Bearer abcdefgh1234" not in done.stdout


def test_export_ndjson(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "export.ndjson"
    done = reel("journal", "export", "--data", str(data), "--out", str(out))
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    kinds = [r["record"] for r in records]
    assert kinds == ["event"] * 22 + ["checkpoint"] * 2
    assert [r["position"] for r in records if r["record"] == "checkpoint"] == [12, 21]
    assert [r["row_position"] for r in records if r["record"] == "checkpoint"] == [13, 22]
    assert records[1]["prev_hash"] == records[0]["hash"]
    to_stdout = reel("journal", "export", "--data", str(data))
    assert to_stdout.stdout == out.read_text(encoding="utf-8")
    assert SECRET not in to_stdout.stdout


def test_reel_data_environment_variable(data: Path) -> None:
    done = reel("journal", "head", env={"REEL_DATA": str(data)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == ["position", "22"]


def test_missing_data_dir(tmp_path: Path) -> None:
    done = reel("journal", "verify", "--data", str(tmp_path / "nope"))
    assert_one_error_line(done, "no journal at", str(tmp_path / "nope"))
    assert not (tmp_path / "nope").exists()  # reading never creates a data dir


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["journal", "verify", "--bogus"], "--bogus"),
        (["journal", "tail", "-n", "0"], "-n"),
        (["journal", "nosuch"], "nosuch"),
    ],
)
def test_usage_errors(data: Path, args: list[str], words: str) -> None:
    assert_one_error_line(reel(*args, "--data", str(data)), words)


def make_bad(data: Path, how: str) -> None:
    path = data / "journal.db"
    if how == "not sqlite":
        path.write_bytes(os.urandom(4096))
    elif how == "other database":
        conn = apsw.Connection(str(path))
        conn.execute("CREATE TABLE t(x)")
        conn.close()
    elif how == "newer schema":
        with Journal(path) as journal:
            journal.append("run/1", [RunOutput(run_id="1", turn=0, text="x")], expected_seq=0)
        conn = apsw.Connection(str(path))
        conn.execute("PRAGMA user_version = 99")
        conn.close()
    elif how == "directory":
        path.mkdir()


@pytest.mark.parametrize(
    ("how", "words", "command"),
    [
        ("not sqlite", "not an SQLite database", "verify"),
        ("other database", "not a reel journal", "head"),
        ("newer schema", "schema version 99", "tail"),
        ("directory", "is a directory", "export"),
    ],
)
def test_bad_files(data_dir: Path, how: str, words: str, command: str) -> None:
    make_bad(data_dir, how)
    assert_one_error_line(reel("journal", command, "--data", str(data_dir)), words)


def test_unsafe_node_key_mode(data: Path) -> None:
    (data / "node.key").chmod(0o644)
    assert_one_error_line(reel("journal", "pubkey", "--data", str(data)), "node.key", "600")
    # verify never reads node.key: it trusts only the key it is given.
    assert reel("journal", "verify", "--data", str(data)).returncode == 0


def test_fresh_and_one_event_data_dirs(data_dir: Path, tmp_path: Path) -> None:
    """Every command on a data dir with nothing in it, then with a one-event journal."""
    assert_one_error_line(reel("journal", "pubkey", "--data", str(data_dir)), "no node key")
    for command in ("verify", "head", "tail", "export"):
        assert_one_error_line(reel("journal", command, "--data", str(data_dir)), "no journal at")
    key = NodeKey.load_or_create(data_dir / "node.key")
    with Journal(data_dir / "journal.db", node_key=key) as journal:
        journal.append("run/1", [RunOutput(run_id="1", turn=0, text="one")], expected_seq=0)
    pem = pin(data_dir, tmp_path)
    done = reel("journal", "verify", "--data", str(data_dir), "--public-key", str(pem), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["events"], report["checkpoints"], report["anchored"]) == (2, 1, True)
    for command in ("head", "tail", "export"):
        done = reel("journal", command, "--data", str(data_dir))
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout


def test_read_only_journal_can_still_be_read(data: Path) -> None:
    path = data / "journal.db"
    path.chmod(0o444)
    try:
        for command in ("verify", "tail"):
            done = reel("journal", command, "--data", str(data))
            assert done.returncode == 0, (command, done.stderr)
            assert done.stdout
            if command == "verify":
                assert "intact" in done.stdout
    finally:
        path.chmod(0o644)
