"""Every ``reel`` command's ``--help`` reads as plain text: typer turns docstrings into help, and
reStructuredText roles or double backticks written for Sphinx show up raw to the operator."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
import typer
from click import Context
from click.core import Command
from typer.core import TyperGroup
from typer.testing import CliRunner

from transports.cli.main import COMMANDS, app, load

MARKUP = ("``", ":func:", ":class:", ":mod:", ":meth:", ":attr:", ":data:", ":exc:")
"""Sphinx markup that must never reach a terminal."""

TYPE_PLACEHOLDERS = ("<list[", "<dict[", "<tuple[", "| None>")
"""Python annotations typer shows as an option's placeholder when no ``metavar`` names it."""


def command_paths() -> Iterator[tuple[str, ...]]:
    """Every command and subcommand of ``reel``, as argument paths (the root is ``()``)."""

    def walk(command: Command, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        if isinstance(command, TyperGroup):
            ctx = Context(command)
            for name in sorted(command.list_commands(ctx)):
                sub = command.get_command(ctx, name)
                assert sub is not None
                yield from walk(sub, (*path, name))

    yield from walk(typer.main.get_command(app), ())


PATHS = list(command_paths())


def test_the_walk_finds_every_command_group() -> None:
    """The walk reaches nested subcommands, not only the top level (else the test below
    would check nothing under ``reel journal``)."""
    assert ("node",) in PATHS and ("journal", "verify") in PATHS
    assert ("tokens", "create") in PATHS and ("approvals", "approve") in PATHS
    assert len(PATHS) > 15


@pytest.mark.parametrize("name", COMMANDS)
def test_reel_help_lists_what_each_command_says_of_itself(name: str) -> None:
    """``reel --help`` lists each command's summary from :data:`COMMANDS` without importing
    its module; the summary must stay what the command's own help says first."""
    summary = COMMANDS[name][1]
    shortened = Command(name, help=summary).get_short_help_str(10_000)
    assert shortened == load(name).get_short_help_str(10_000)
    listed = CliRunner().invoke(app, ["--help"], prog_name="reel").output
    assert f"  {name} " in listed


HEAVY = (
    "actors.system.node",
    "events.sqlite.journal",
    "events.redaction.detectors",
    "cedarpy",
    "grpclib",
)
"""What made every command take a second or more before it started (bench/cli_start.py)."""


@pytest.mark.parametrize(
    ("argv", "loaded"),
    [
        ([], []),
        (["tokens"], ["transports.cli.tokens_cmd"]),
        (["tokens", "list"], ["transports.cli.tokens_cmd"]),
        (["vault", "list"], ["transports.cli.vault_cmd"]),
    ],
    ids=["reel", "reel tokens", "reel tokens list", "reel vault list"],
)
def test_help_and_a_client_command_import_none_of_the_node(
    argv: list[str], loaded: list[str]
) -> None:
    """``reel --help`` imports no command's module; ``reel tokens`` only its own, and neither
    the journal's writer, the redaction rules, Cedar, gRPC nor the actors."""
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from transports.cli.main import app\n"
        "CliRunner().invoke(app, [*sys.argv[1:], '--help'], prog_name='reel')\n"
        f"print(sorted(m for m in sys.modules if m in {HEAVY!r} or m.endswith('_cmd')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, *argv], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == repr(loaded)


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(("reel", *path)))
def test_help_has_no_restructuredtext_markup(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="reel")
    assert result.exit_code == 0, result.output
    assert "Usage: reel" in result.output
    found = [mark for mark in MARKUP if mark in result.output]
    assert not found, f"reel {' '.join(path)} --help shows {found}:\n{result.output}"


@pytest.mark.parametrize("path", PATHS, ids=lambda path: " ".join(("reel", *path)))
def test_help_names_what_an_option_takes_not_its_python_type(path: tuple[str, ...]) -> None:
    """A repeatable option shows ``<role>``, not ``<list[str]>``."""
    output = CliRunner().invoke(app, [*path, "--help"], prog_name="reel").output
    found = [mark for mark in TYPE_PLACEHOLDERS if mark in output]
    assert not found, f"reel {' '.join(path)} --help shows {found}:\n{output}"


def test_typer_passes_docstring_markup_through() -> None:
    """The check above can fail: typer prints a command's docstring as written."""
    probe = typer.Typer(rich_markup_mode=None)

    @probe.command()
    def run() -> None:
        """Uses ``roles`` and :func:`roles`."""

    output = CliRunner().invoke(probe, ["--help"]).output
    assert "``roles``" in output and ":func:`roles`" in output
