"""``reel``'s command tree in typer: :data:`~transports.cli.commands.COMMANDS` mounted as one group,
each command's module imported on first use, and typer's own outcomes (help, usage errors,
Ctrl-C) turned into exit codes. Imported by :func:`transports.cli.main.main` for every command
line but ``reel node``'s plain one (:mod:`transports.cli.node_start`)."""

from __future__ import annotations

import importlib
import sys
from typing import Annotated

import typer
import typer.main
from click import Context, HelpFormatter
from click.core import Command
from click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperGroup

from transports.build import version
from transports.cli.commands import COMMANDS
from transports.cli.errors import EXIT_INTERRUPTED, EXIT_UNUSABLE


def load(name: str) -> Command:
    """The click command ``name`` of :data:`COMMANDS`, its module imported now. A function
    command takes its module's ``epilog()`` when it has one (``reel node``'s environment)."""
    module_name, attribute = COMMANDS[name][0].split(":")
    module = importlib.import_module(module_name)
    target = getattr(module, attribute)
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        epilog = getattr(module, "epilog", None)
        holder.command(name, epilog=epilog() if epilog else None)(target)
        holder.callback()(lambda: None)  # a group even with one command: mounted by name
    group = typer.main.get_command(holder)
    assert isinstance(group, TyperGroup)
    return group.commands[name]


class _Commands(TyperGroup):
    """reel's top-level group: :data:`COMMANDS`, each loaded on first use."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load(cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        # A stand-in command per summary: click's own shortening, the module not imported.
        rows = [
            (name, Command(name, help=summary).get_short_help_str(limit))
            for name, (_, summary) in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


app = typer.Typer(
    name="reel",
    help="reel: run AI agents under policy, on a hash-chained journal.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
    cls=_Commands,
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


def run() -> int:
    """Parse ``sys.argv`` and run the command it names; its exit code. Help without a command
    and usage errors are one line (or the help) and exit 2, Ctrl-C exit 130; whatever else a
    command raises propagates to :func:`transports.cli.main.main`."""
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:
        exc.show()
        return EXIT_UNUSABLE
    except UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        print(f"reel: error: {exc.format_message()}{hint}", file=sys.stderr)
        return EXIT_UNUSABLE
    except typer.Abort:
        return EXIT_INTERRUPTED
    return code if isinstance(code, int) else 0
