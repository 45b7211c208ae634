"""``reel node`` without typer (:mod:`transports.cli.node_start`): a plain command line starts the
node without importing typer, anything else goes to typer, and a refused option is typer's own
line, word for word."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import REEL
from transports.cli.node_start import NodeOptions, read

NOT_FOR_A_NODE = (
    "typer",
    "transports.cli.group",
    "transports.cli.node_cmd",
    "transports.grpc.client",
)
"""What ``reel node`` used to load before it served, and a node does not need: typer and its
command (the options), the gRPC client (grpclib's own client module stays: its health service
imports it)."""


@pytest.mark.parametrize(
    ("argv", "options"),
    [
        (["node"], NodeOptions()),
        (["node", "--data", "d"], NodeOptions(data=Path("d"))),
        (["node", "--data=d", "--provider", "openai"], NodeOptions(Path("d"), provider="openai")),
        (
            ["node", "--config", "c.toml", "--data", "d", "--provider=nope"],
            NodeOptions(Path("d"), Path("c.toml"), "nope"),
        ),
    ],
)
def test_a_plain_command_line_is_read_without_typer(
    argv: list[str], options: NodeOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value :func:`~transports.cli.node_start.start` refuses (``--provider=nope``) is read
    here: ``start`` refuses it before anything opens, and typer then says so."""
    monkeypatch.delenv("REEL_CONFIG", raising=False)
    assert read(argv) == options


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["chat", "--data", "d"],
        ["--version", "node"],
        ["node", "--help"],
        ["node", "--data"],
        ["node", "--data", "d", "--data", "e"],
        ["node", "--data", "--config"],
        ["node", "--data="],
        ["node", "--data", ""],
        ["node", "--datum", "d"],
        ["node", "d"],
        ["node", "--", "--data", "d"],
    ],
)
def test_anything_else_is_left_to_typer(argv: list[str]) -> None:
    assert read(argv) is None


def test_config_comes_from_the_environment_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """As typer's ``--config`` with ``envvar="REEL_CONFIG"``: the option wins, an empty variable
    is no variable."""
    monkeypatch.setenv("REEL_CONFIG", "env.toml")
    assert read(["node"]) == NodeOptions(config=Path("env.toml"))
    assert read(["node", "--config", "c.toml"]) == NodeOptions(config=Path("c.toml"))
    monkeypatch.setenv("REEL_CONFIG", "")
    assert read(["node"]) == NodeOptions()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--provider", "nope"],
            "reel: error: Invalid value for --provider: must be deterministic or openai "
            "(see 'reel node --help')",
        ),
        (
            ["--config", "{missing}"],
            "reel: error: Invalid value for --config: no config file at {missing} "
            "(see 'reel node --help')",
        ),
    ],
)
def test_a_refused_option_is_typers_usage_line(tmp_path: Path, args: list[str], line: str) -> None:
    missing = str(tmp_path / "missing.toml")
    done = subprocess.run(
        [
            str(REEL),
            "node",
            "--data",
            str(tmp_path / "data"),
            *(a.format(missing=missing) for a in args),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REEL_CONFIG": ""},
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, line.format(missing=missing) + "\n")
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_reel_node_starts_without_typer(tmp_path: Path) -> None:
    """Everything ``reel node --data D`` imports before it serves, with ``serve`` replaced by a
    probe: typer, the typer command and gRPC's client side are not among it (each a tenth of a
    second or more of start-up, issue 23)."""
    probe = (
        "import sys\n"
        "import transports.node.daemon as daemon\n"
        "from transports.cli.main import main\n"
        "def serve(data_dir, **_):\n"
        f"    print(sorted(m for m in sys.modules if m in {NOT_FOR_A_NODE!r}), data_dir.name)\n"
        "    return 0\n"
        "daemon.serve = serve\n"
        f"sys.argv = ['reel', 'node', '--data', {str(tmp_path / 'data')!r}]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "REEL_CONFIG": ""},
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "[] data\n", "")
