"""The ``reel`` entry point: the commands of :mod:`transports.cli.commands`, failures mapped to
exit codes.

The command tree itself is typer's (:mod:`transports.cli.group`), imported only when a command
line needs it: ``reel node`` with nothing but ``--data``, ``--config`` and ``--provider`` starts
without typer (:mod:`transports.cli.node_start`), a tenth of a second or more sooner.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from transports.cli.commands import COMMANDS
from transports.cli.errors import EXIT_INTERRUPTED, EXIT_UNUSABLE, CliError, failed
from transports.logs import configure as configure_logging

if TYPE_CHECKING:
    from transports.cli.group import app, load

__all__ = ["COMMANDS", "app", "load", "main"]


def __getattr__(name: str) -> Any:
    """``app`` and ``load`` (:mod:`transports.cli.group`), imported with typer on first use."""
    if name in ("app", "load"):
        from transports.cli import group

        return getattr(group, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Run the CLI; expected failures become one line on stderr and their exit code
    (:mod:`transports.cli.errors`: a :class:`CliError`'s own, else its kind's). Whatever logs
    while a command runs (the node, libraries) writes JSON lines (transports.logs)."""
    configure_logging()
    try:
        code = _node(sys.argv[1:])
        if code is None:
            from transports.cli.group import run

            code = run()
    except CliError as exc:
        print(f"reel: error: {exc}", file=sys.stderr)
        sys.exit(exc.code)
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:
        error = failed(exc)
        if error is not None:
            print(f"reel: error: {error}", file=sys.stderr)
            sys.exit(error.code)
        missing = _missing_dependency(exc)
        if missing is not None:
            print(
                f"reel: error: the Python package {missing!r} reel needs is not installed here; "
                "reinstall reel's dependencies (make .venv/.installed, or pip install -e .)",
                file=sys.stderr,
            )
            sys.exit(EXIT_UNUSABLE)
        # A bug: one line, the traceback only when asked for.
        if os.environ.get("REEL_DEBUG"):
            raise
        print(
            f"reel: internal error: {type(exc).__name__}: {exc} (REEL_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        sys.exit(EXIT_UNUSABLE)
    sys.exit(code)


OWN_PACKAGES = frozenset(
    {"events", "projections", "actors", "policies", "tools", "transports", "proto"}
)
"""reel's own top-level packages: one of them missing is a broken install or a bug."""


def _missing_dependency(exc: Exception) -> str | None:
    """The top-level package whose import failed, when it is a dependency rather than reel's
    own: a venv made before the dependency was added (a checkout updated without reinstalling)
    says so in one line, not as an internal error."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    package = exc.name.partition(".")[0]
    return None if package in OWN_PACKAGES else package


def _node(argv: list[str]) -> int | None:
    """``reel node``'s exit code when typer is not needed to read ``argv``, else None."""
    from transports.cli import node_start

    options = node_start.read(argv)
    if options is None:
        return None
    try:
        return node_start.start(options)
    except node_start.OptionRefused:
        return None  # typer's path says so, in its words (nothing was opened yet)
