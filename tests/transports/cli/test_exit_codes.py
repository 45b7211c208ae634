"""The CLI's exit codes: one table in the code (transports.cli.errors), the same in README.md,
and a Cedar denial exits 3 (never 2, the code of usage errors), over HTTP and over gRPC, from
the real console script against a real ``reel node``."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from tests import processes
from transports.cli import errors
from transports.cli.errors import EXIT_CODES, EXIT_DENIED, EXIT_UNUSABLE

REEL = Path(sys.executable).with_name("reel")
README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_exit_code_has_one_name_and_readme_lists_them_all() -> None:
    constants = {
        value
        for name, value in vars(errors).items()
        if name.startswith("EXIT_") and name != "EXIT_CODES"
    }
    assert constants == set(EXIT_CODES)
    text = README.read_text(encoding="utf-8")
    section = text.split("### Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", section, re.MULTILINE))
    assert {int(code) for code in rows} == set(EXIT_CODES), rows
    for code, name in EXIT_CODES.items():
        assert rows[str(code)].lower().startswith(name.lower()), (code, rows[str(code)])


class RunningClientEnv(NamedTuple):
    data: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningClientEnv]:
    """A real ``reel node`` on loopback ports; client commands find it through node.json."""
    data = tmp_path_factory.mktemp("exit-codes") / "data"
    env = {**os.environ, "REEL_HTTP_PORT": "0", "REEL_GRPC_PORT": "0"}
    env.pop("REEL_TOKEN", None)
    with processes.node(
        "--data", data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as node:
        assert node.stdout is not None
        ready = node.stdout.readline()
        assert ready.startswith("reel node ready"), ready
        try:
            yield RunningClientEnv(data, env)
        finally:
            assert processes.stop(node, signal.SIGTERM) == 0


def reel(
    running: RunningClientEnv, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = running.env if token is None else {**running.env, "REEL_TOKEN": token}
    return processes.run(
        [str(REEL), *args, "--data", str(running.data)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=env,
    )


@pytest.fixture(scope="module")
def viewer(running: RunningClientEnv) -> str:
    made = reel(running, "tokens", "create", "--principal", "user:vic", "--role", "viewer")
    assert made.returncode == 0, made.stdout + made.stderr
    return made.stdout.strip().splitlines()[-1]


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("reel: error: ") and "Traceback" not in done.stderr
    return line


@pytest.mark.parametrize(
    ("args", "action"),
    [
        (["tokens", "list"], "token.manage"),
        (["tokens", "create", "--principal", "user:eve", "--role", "admin"], "token.manage"),
        (["memory", "write", "the build server is ci-3", "--scope", "global"], "memory.write"),
    ],
    ids=["tokens-list", "tokens-create", "memory-write"],
)
def test_a_cedar_denial_over_http_exits_3(
    running: RunningClientEnv, viewer: str, args: list[str], action: str
) -> None:
    done = reel(running, *args, token=viewer)
    assert done.returncode == EXIT_DENIED, done.stdout + done.stderr
    assert action in one_line(done) and viewer not in done.stderr


def test_a_cedar_denial_over_grpc_exits_3(running: RunningClientEnv, viewer: str) -> None:
    done = reel(running, "chat", "hello", token=viewer)
    assert done.returncode == EXIT_DENIED, done.stdout + done.stderr
    assert "PERMISSION_DENIED" in one_line(done) and viewer not in done.stderr


def test_a_refused_token_and_a_usage_error_still_exit_2(running: RunningClientEnv) -> None:
    refused = reel(running, "tokens", "list", token="reel_not_a_token")
    assert refused.returncode == EXIT_UNUSABLE and "reel_not_a_token" not in refused.stderr
    one_line(refused)
    usage = reel(running, "tokens", "create", "--principal", "user:x", "--role", "wizard")
    assert usage.returncode == EXIT_UNUSABLE
