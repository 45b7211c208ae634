"""The NDJSON export is enough to re-verify the chain without reel: a stdlib-only script that
follows docs/journal-format.md accepts a real export and names the line of an altered one."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from events import MARKER, Journal, NodeKey, Witness
from events.catalog import RunAccepted
from tests import processes
from tests.events.journal_testkit import build_journal

VERIFIER = Path(__file__).with_name("independent_verify.py")
REEL = Path(sys.executable).with_name("reel")


class Exported:
    """A real export of a journal written with a witness, and what the tests need of it."""

    def __init__(self, root: Path) -> None:
        data = root / "data"
        self.witness = root / "witness.notes"
        self.key = build_journal(data, runs=4, witness=self.witness)
        with Journal(
            data / "journal.db", node_key=self.key, witness=Witness.open(self.witness)
        ) as journal:
            journal.append(
                "session/s2",
                [
                    RunAccepted(
                        run_id="u", session_id="s2", text="naïve café ☕ — 日本語 password=x1"
                    )
                ],
                expected_seq=None,
                correlation_id="",  # present but empty: not the absent marker
            )
        self.path = root / "export.ndjson"
        done = processes.run(
            [str(REEL), "journal", "export", "--data", str(data), "--out", str(self.path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        self.lines = self.path.read_text(encoding="utf-8").splitlines()
        self.records = [json.loads(line) for line in self.lines]
        self.events = [r for r in self.records if r["record"] == "event"]
        self.checkpoint_rows = [r["position"] for r in self.events if r["stream"] == "journal"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Exported:
    return Exported(tmp_path_factory.mktemp("export"))


def run_verifier(
    path: Path, *args: str, isolated: bool = False
) -> subprocess.CompletedProcess[str]:
    # -I -S: no site-packages at all, so the script can only be using the standard library.
    flags = ["-I", "-S"] if isolated else []
    return subprocess.run(
        [sys.executable, *flags, str(VERIFIER), str(path), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_export_lines(exported: Exported) -> None:
    events = exported.events
    checkpoints = [r for r in exported.records if r["record"] == "checkpoint"]
    head = len(events)
    assert [r["position"] for r in events] == list(range(1, head + 1))
    assert exported.records == events + checkpoints  # events first, then checkpoints
    # 41 events: the append that reaches 40 rows is signed (row 42; the close then has
    # nothing new to sign); one more event and the second close signs it (row 44).
    assert exported.checkpoint_rows == [42, head] and head == 44
    assert [c["row_position"] for c in checkpoints] == exported.checkpoint_rows
    assert [c["previous"] for c in checkpoints] == [0, 42]
    for checkpoint in checkpoints:
        row = events[checkpoint["row_position"] - 1]
        assert row["kind"] == "journal.checkpoint"
        assert row["prev_hash"] == checkpoint["hash"] == events[checkpoint["position"] - 1]["hash"]
        assert checkpoint["note"].startswith(f"{exported.key.origin}\n{checkpoint['position']}\n")
        assert (
            row["event"]["signature"]
            == base64.b64encode(bytes.fromhex(checkpoint["signature"])).decode()
        )
    last = events[-2]
    assert last["event"]["text"] == f"naïve café ☕ — 日本語 password={MARKER}"
    assert last["correlation_id"] == ""
    assert events[0]["correlation_id"] is None
    payload = msgspec.msgpack.decode(base64.b64decode(last["payload_b64"]))
    assert payload["kind"] == last["kind"] == "run.accepted"
    # The witness holds the same notes, in order.
    assert exported.witness.read_text(encoding="utf-8") == "".join(
        c["note"] + "\n" for c in checkpoints
    )


def test_independent_verifier_accepts_a_real_export(exported: Exported) -> None:
    done = run_verifier(exported.path, isolated=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 44 events")
    assert done.stdout.rstrip().endswith("UNANCHORED")
    witnessed = run_verifier(exported.path, "--witness", str(exported.witness), isolated=True)
    assert witnessed.returncode == 0, witnessed.stdout + witnessed.stderr
    assert witnessed.stdout.rstrip().endswith("witness")
    signed = run_verifier(exported.path, "--public-key", exported.key.public_key.hex())
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert "signatures checked against the pinned key, pinned key" in signed.stdout


def altered_copy(source: Path, target: Path, line: int, edit: dict[str, object]) -> Path:
    lines = source.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[line - 1])
    record.update(edit)
    lines[line - 1] = json.dumps(record)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


@pytest.mark.parametrize(
    ("line", "edit", "words"),
    [
        (7, {"principal": "user:mallory"}, "hash of position 7"),
        (7, {"payload_b64": base64.b64encode(b"\x81\xa4kind\xa3bad").decode()}, "hash"),
        (12, {"correlation_id": None}, "hash of position 12"),
        (20, {"prev_hash": "00" * 32}, "prev_hash"),
        (41, {"stream": "run/x"}, "hash of position 41"),
        (42, {"stream_seq": 1}, "hash of position 42"),  # the first checkpoint row
        (45, {"hash": "ab" * 32}, "disagrees"),  # the first checkpoint record
    ],
)
def test_independent_verifier_names_the_altered_line(
    exported: Exported,
    tmp_path: Path,
    line: int,
    edit: dict[str, object],
    words: str,
) -> None:
    bad = altered_copy(exported.path, tmp_path / "bad.ndjson", line, edit)
    done = run_verifier(bad, isolated=True)
    assert done.returncode == 1
    assert done.stdout.startswith(f"FAILED: line {line}: "), done.stdout
    assert words in done.stdout


def test_independent_verifier_checks_the_pinned_key(exported: Exported, data_dir: Path) -> None:
    other = NodeKey.load_or_create(data_dir / "other.key")
    done = run_verifier(exported.path, "--public-key", other.public_key.hex())
    assert done.returncode == 1
    assert done.stdout.startswith(f"FAILED: line {exported.checkpoint_rows[0]}: ")
    assert "another key" in done.stdout


def test_independent_verifier_finds_a_truncation_the_witness_saw(
    exported: Exported, tmp_path: Path
) -> None:
    """Cut the export after the first checkpoint: the chain is intact, only the witness can
    tell."""
    keep = exported.checkpoint_rows[0]
    lines = [r for r in exported.records if r["record"] == "event" and r["position"] <= keep]
    lines += [
        r for r in exported.records if r["record"] == "checkpoint" and r["row_position"] <= keep
    ]
    cut = tmp_path / "cut.ndjson"
    cut.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    assert run_verifier(cut, isolated=True).returncode == 0  # unanchored: it cannot tell
    done = run_verifier(cut, "--witness", str(exported.witness), isolated=True)
    assert done.returncode == 1
    assert f"the witnessed checkpoint at {exported.checkpoint_rows[1]} is not in the export" in (
        done.stdout
    )
