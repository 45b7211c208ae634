"""``reel``'s commands: where each lives and what ``reel --help`` says of it.

Apart from :mod:`transports.cli.main` (the entry point) and :mod:`transports.cli.group` (the
typer tree that mounts them), which both read it.
"""

from __future__ import annotations

__all__ = ["COMMANDS"]

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
