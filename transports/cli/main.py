"""The ``reel`` entry point: :data:`COMMANDS`, and failures mapped to exit codes.

The command tree itself is typer's (:mod:`transports.cli.group`), imported only when a command
line needs it: ``reel node`` with nothing but ``--data``, ``--config`` and ``--provider`` starts
without typer (:mod:`transports.cli.node_start`), a tenth of a second or more sooner.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from transports.cli.errors import EXIT_INTERRUPTED, EXIT_UNUSABLE, CliError, failed
from transports.logs import configure as configure_logging

if TYPE_CHECKING:
    from transports.cli.group import app, load

__all__ = ["COMMANDS", "app", "load", "main"]

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
    "schedules": (
        "transports.cli.schedules_cmd:app",
        "Create, list, pause, resume, delete and run-now schedules (runs on a timetable).",
    ),
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
        " incidents, the task queue, each model endpoint's circuit. Exit 1 when no node runs.",
    ),
    "mcp": ("transports.cli.mcp_cmd:app", "MCP servers: their state, their tools, a test."),
    "providers": (
        "transports.cli.providers_cmd:app",
        "Model endpoints: their circuit states, and a test of each.",
    ),
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
        # A bug: one line, the traceback only when asked for.
        if os.environ.get("REEL_DEBUG"):
            raise
        print(
            f"reel: internal error: {type(exc).__name__}: {exc} (REEL_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        sys.exit(EXIT_UNUSABLE)
    sys.exit(code)


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
