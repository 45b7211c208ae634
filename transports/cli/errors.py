"""How the CLI turns failures into exit codes: one line on stderr, never a traceback."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_UNUSABLE = 2


class CliError(Exception):
    """A failure to report as ``reel: error: <message>`` with an exit code (default 2)."""

    def __init__(self, message: str, code: int = EXIT_UNUSABLE) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = EXIT_UNUSABLE) -> NoReturn:
    """Print one line to stderr and exit with ``code``."""
    print(f"reel: error: {message}", file=sys.stderr)
    raise typer.Exit(code)
