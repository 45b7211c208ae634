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

from events import MARKER, Journal, NodeKey
from events.catalog import RunAccepted
from tests.events.journal_testkit import build_journal

VERIFIER = Path(__file__).with_name("independent_verify.py")
REEL = Path(sys.executable).with_name("reel")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, NodeKey]:
    data = tmp_path_factory.mktemp("export")
    key = build_journal(data, runs=4)
    with Journal(data / "journal.db", node_key=key) as journal:
        journal.append(
            "session/s2",
            [RunAccepted(run_id="u", session_id="s2", text="naïve café ☕ — 日本語 password=x1")],
            expected_seq=None,
            correlation_id="",  # present but empty: not the absent marker
        )
    out = data / "export.ndjson"
    done = subprocess.run(
        [str(REEL), "journal", "export", "--data", str(data), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out, key


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


def test_export_lines(exported: tuple[Path, NodeKey]) -> None:
    lines = exported[0].read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    events = [r for r in records if r["record"] == "event"]
    checkpoints = [r for r in records if r["record"] == "checkpoint"]
    assert [r["position"] for r in events] == list(range(1, 43))
    assert records == events + checkpoints  # events first, then checkpoints
    assert checkpoints[-1]["position"] == 42
    last = events[-1]
    assert last["event"]["text"] == f"naïve café ☕ — 日本語 password={MARKER}"
    assert last["correlation_id"] == ""
    assert events[0]["correlation_id"] is None
    payload = msgspec.msgpack.decode(base64.b64decode(last["payload_b64"]))
    assert payload["kind"] == last["kind"] == "run.accepted"


def test_independent_verifier_accepts_a_real_export(exported: tuple[Path, NodeKey]) -> None:
    done = run_verifier(exported[0], isolated=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: 42 events")
    signed = run_verifier(exported[0], "--public-key", exported[1].public_key.hex())
    assert signed.returncode == 0, signed.stdout + signed.stderr
    assert "signatures checked" in signed.stdout


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
        (43, {"hash": "ab" * 32}, "disagrees"),
    ],
)
def test_independent_verifier_names_the_altered_line(
    exported: tuple[Path, NodeKey],
    tmp_path: Path,
    line: int,
    edit: dict[str, object],
    words: str,
) -> None:
    bad = altered_copy(exported[0], tmp_path / "bad.ndjson", line, edit)
    done = run_verifier(bad, isolated=True)
    assert done.returncode == 1
    assert done.stdout.startswith(f"FAILED: line {line}: "), done.stdout
    assert words in done.stdout


def test_independent_verifier_checks_signatures_when_asked(
    exported: tuple[Path, NodeKey], tmp_path: Path
) -> None:
    lines = exported[0].read_text(encoding="utf-8").splitlines()
    first_checkpoint = next(i for i, text in enumerate(lines, 1) if '"checkpoint"' in text)
    record = json.loads(lines[first_checkpoint - 1])
    signature = bytearray.fromhex(record["signature"])
    signature[5] ^= 1
    bad = altered_copy(
        exported[0], tmp_path / "bad.ndjson", first_checkpoint, {"signature": signature.hex()}
    )
    done = run_verifier(bad, "--public-key", exported[1].public_key.hex())
    assert done.returncode == 1
    assert done.stdout.startswith(f"FAILED: line {first_checkpoint}: ")
    assert "bad signature" in done.stdout
