"""Bad input on the command line: exit 2 and exactly one line on stderr, never a traceback and
never an "internal error"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import processes

REEL = Path(sys.executable).with_name("reel")


@pytest.mark.parametrize(
    "args",
    [
        ["chat", "--address", "nope", "--token-file", "{missing}", "hi"],
        ["chat", "--address", "127.0.0.1:99999", "hi"],
        ["chat", "--resume", "not-an-id", "--address", "127.0.0.1:1"],
        ["journal", "head", "--data", "{missing}"],
        ["journal", "verify", "--data", "{data}", "--public-key", "{missing}"],
        ["journal", "tail", "--data", "{data}", "--no-such-option"],
        ["approvals", "approve", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--data", "{missing}"],
        ["approvals", "revoke", "--principal", "a", "--tool", "b", "--data", "{missing}"],
        ["tokens", "revoke", "nope", "--data", "{missing}"],
        ["tokens", "create", "--data", "{missing}"],
        ["node", "--data", "{data}", "--config", "{missing}"],
        ["node", "--data", "{data}", "--provider", "nope"],
        ["replay", "--data", "{missing}"],
        ["tools", "--data", "{data}", "--bogus"],
        ["policy", "check", "--data", "{data}"],
    ],
)
def test_bad_input_is_exit_2_and_one_line(tmp_path: Path, args: list[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    filled = [
        a.replace("{missing}", str(tmp_path / "missing")).replace("{data}", str(data)) for a in args
    ]
    done = processes.run(
        [str(REEL), *filled],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("reel: error: "), lines
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
