"""The ``reel`` entry point: mounts each command group and maps failures to exit codes."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from transports.build import version
from transports.cli import (
    approvals_cmd,
    channels_cmd,
    chat_cmd,
    config_cmd,
    incidents_cmd,
    journal_cmd,
    learning_cmd,
    memory_cmd,
    node_cmd,
    policy_cmd,
    replay_cmd,
    sessions_cmd,
    tasks_cmd,
    tokens_cmd,
    tools_cmd,
)
from transports.cli.errors import EXIT_INTERRUPTED, EXIT_UNUSABLE, CliError, failed
from transports.logs import configure as configure_logging

app = typer.Typer(
    name="reel",
    help="reel: run AI agents under policy, on a hash-chained journal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _print_version(asked: bool) -> None:
    if asked:
        print(f"reel {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print reel's version (and commit, from a checkout) and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    pass


app.add_typer(journal_cmd.app, name="journal")
app.command("node", epilog=node_cmd.environment_help())(node_cmd.node)
app.command("chat")(chat_cmd.chat)
app.add_typer(approvals_cmd.app, name="approvals")
app.add_typer(incidents_cmd.app, name="incidents")
app.add_typer(policy_cmd.app, name="policy")
app.add_typer(tokens_cmd.app, name="tokens")
app.add_typer(tasks_cmd.app, name="tasks")
app.add_typer(memory_cmd.app, name="memory")
app.add_typer(learning_cmd.app, name="learning")
app.add_typer(sessions_cmd.app, name="sessions")
app.add_typer(channels_cmd.app, name="channels")
app.add_typer(config_cmd.app, name="config")
app.command("tools")(tools_cmd.tools)
app.command("replay")(replay_cmd.replay_cmd)


def main() -> None:
    """Run the CLI; expected failures become one line on stderr and their exit code
    (:mod:`transports.cli.errors`: a :class:`CliError`'s own, else its kind's). Whatever logs
    while a command runs (the node, libraries) writes JSON lines (transports.logs)."""
    configure_logging()
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()
        sys.exit(EXIT_UNUSABLE)
    except UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        print(f"reel: error: {exc.format_message()}{hint}", file=sys.stderr)
        sys.exit(EXIT_UNUSABLE)
    except typer.Abort:
        sys.exit(EXIT_INTERRUPTED)
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
        # A bug: one line, the traceback only when asked for.
        if os.environ.get("REEL_DEBUG"):
            raise
        print(
            f"reel: internal error: {type(exc).__name__}: {exc} (REEL_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        sys.exit(EXIT_UNUSABLE)
    sys.exit(code if isinstance(code, int) else 0)
