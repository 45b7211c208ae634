"""The ``reel`` entry point: mounts each command group and maps failures to exit codes."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Annotated

import typer
import typer.main
from typer._click import Context, HelpFormatter
from typer._click.core import Command
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer._click.utils import make_default_short_help
from typer.core import TyperGroup

from transports.build import version
from transports.cli.errors import EXIT_INTERRUPTED, EXIT_UNUSABLE, CliError, failed
from transports.logs import configure as configure_logging

COMMANDS: dict[str, tuple[str, str]] = {
    "node": (
        "transports.cli.node_cmd:node",
        "Run the node in the foreground until SIGTERM or SIGINT (then drain and exit 0).",
    ),
    "chat": (
        "transports.cli.chat_cmd:chat",
        "Send a message and stream the run: over gRPC to a running node, or --local in-process.",
    ),
    "tools": (
        "transports.cli.tools_cmd:tools",
        "List tools: risk, capabilities, effective posture, time-out, and why a tool cannot run"
        " on this node (e.g. shell.run without a working bubblewrap sandbox).",
    ),
    "replay": (
        "transports.cli.replay_cmd:replay_cmd",
        "Verify the chain and checkpoints, rebuild the views from the journal alone, compare.",
    ),
    "journal": ("transports.cli.journal_cmd:app", "Inspect and verify the hash-chained journal."),
    "approvals": (
        "transports.cli.approvals_cmd:app",
        "List and decide approvals: tool calls, and chat senders asking to be paired.",
    ),
    "incidents": ("transports.cli.incidents_cmd:app", "What the node's watchdog found."),
    "policy": ("transports.cli.policy_cmd:app", "Inspect the policy set."),
    "tokens": ("transports.cli.tokens_cmd:app", "Create, list and revoke API tokens."),
    "vault": ("transports.cli.vault_cmd:app", "Set, list, rotate and delete vault secrets."),
    "tasks": ("transports.cli.tasks_cmd:app", "List, show and cancel background tasks."),
    "memory": ("transports.cli.memory_cmd:app", "Write, search, list and delete memory items."),
    "learning": (
        "transports.cli.learning_cmd:app",
        "List, show and review what reflection learned (facts, preferences, procedures).",
    ),
    "sessions": (
        "transports.cli.sessions_cmd:app",
        "List and show sessions, reset or branch one, compact its context, restore a checkpoint.",
    ),
    "runs": ("transports.cli.runs_cmd:app", "List runs, show one, print its tape, cancel it."),
    "workspace": (
        "transports.cli.workspace_cmd:app",
        "Workspace checkpoints: list them, show what changed since one, restore one.",
    ),
    "channels": (
        "transports.cli.channels_cmd:app",
        "Chat channels: list them, mint pairing codes.",
    ),
    "config": ("transports.cli.config_cmd:app", "The node's configuration."),
    "doctor": (
        "transports.cli.doctor_cmd:doctor",
        "Check a data dir and the node on it: modes, config, journal and clock, witness, sandbox,"
        " ports, disk space; each finding with its fix. Exit 1 when any check fails.",
    ),
    "status": (
        "transports.cli.status_cmd:status",
        "Whether a node runs on the data dir and what it is doing: address, version, uptime,"
        " journal head and last checkpoint, views lag, live runs, pending approvals, open"
        " incidents, the task queue. Exit 1 when no node runs.",
    ),
    "mcp": ("transports.cli.mcp_cmd:app", "MCP servers: their state, their tools, a test."),
    "usage": (
        "transports.cli.usage_cmd:usage",
        "Tokens, turns and cost by principal, session or model over UTC days.",
    ),
}
"""Each command: where it lives (``module:attribute``, a ``typer.Typer`` group or a command
function) and the summary ``reel --help`` lists. A command's module is imported only when the
command runs (or its own ``--help`` is asked for): together they import the journal, the
actors, Cedar and gRPC, a second before a command could start, where ``reel --help`` and a
client command need none of it. tests/transports/cli/test_help_text.py holds each summary
equal to the first paragraph of the command's own help."""


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
        rows = [
            (name, make_default_short_help(summary, limit))
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
