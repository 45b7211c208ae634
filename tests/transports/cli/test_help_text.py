"""Every ``reel`` command's ``--help`` reads as plain text: typer turns docstrings into help, and
reStructuredText roles or double backticks written for Sphinx show up raw to the operator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer
from typer.testing import CliRunner

from transports.cli.main import app

MARKUP = ("``", ":func:", ":class:", ":mod:", ":meth:", ":attr:", ":data:", ":exc:")
"""Sphinx markup that must never reach a terminal."""

TYPE_PLACEHOLDERS = ("<list[", "<dict[", "<tuple[", "| None>")
"""Python annotations typer shows as an option's placeholder when no ``metavar`` names it."""


def command_paths() -> Iterator[tuple[str, ...]]:
    """Every command and subcommand of ``reel``, as argument paths (the root is ``()``)."""

    def walk(command: object, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    yield from walk(typer.main.get_command(app), ())


PATHS = list(command_paths())


def test_the_walk_finds_every_command_group() -> None:
    """The walk reaches nested subcommands, not only the top level (else the test below
    would check nothing under ``reel journal``)."""
    assert ("node",) in PATHS and ("journal", "verify") in PATHS
    assert ("tokens", "create") in PATHS and ("approvals", "approve") in PATHS
    assert len(PATHS) > 15


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
