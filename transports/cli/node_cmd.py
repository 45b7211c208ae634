"""``reel node``: run the daemon in the foreground."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated

import typer

from transports.cli import node_start
from transports.cli.options import DataOption
from transports.config import NodeConfig, env_names

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="REEL_CONFIG",
        show_envvar=False,
        help="config.toml to read (default: $REEL_CONFIG, else <data>/config.toml; "
        "without one the node runs on embedded defaults).",
    ),
]
ProviderOption = Annotated[
    str | None,
    typer.Option("--provider", help="Model provider: deterministic or openai (overrides config)."),
]


def chosen_config(data_dir: Path, config: Path | None) -> Path:
    """:func:`transports.cli.node_start.chosen_config`, refusing as typer does."""
    try:
        return node_start.chosen_config(data_dir, config)
    except node_start.OptionRefused as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None


def epilog() -> str:
    """The epilog of ``reel node --help``: every ``REEL_*`` variable the node reads. ``\\b``
    keeps click from re-flowing the lists."""
    api_key = NodeConfig().provider.api_key_env
    lines = [
        "Environment: each key of config.toml can be set as REEL_<TABLE>_<KEY> (a TOML value, "
        "else a string), which wins over the file: REEL_HTTP_PORT=0 REEL_RUNS_MAX_TURNS=4.",
        "",
        "\b",
    ]
    for section, names in env_names().items():
        lines += textwrap.wrap(
            " ".join(names), width=78, initial_indent=f"{section}: ", subsequent_indent="  "
        )
    lines += [
        "",
        f"Also: REEL_DATA (--data), REEL_CONFIG (--config), the provider's API key from the "
        f"variable provider.api_key_env names (default {api_key}), REEL_DEBUG=1 (tracebacks of "
        "internal errors). Logs are JSON lines on stderr; the first Ctrl-C or SIGTERM drains, "
        "a second stops at once. The config is read only at start: reel config show prints "
        "what the next start reads, and where each value comes from. See docs/operations.md.",
    ]
    return "\n".join(lines)


def node(
    data: DataOption = None, config: ConfigOption = None, provider: ProviderOption = None
) -> None:
    """Run the node in the foreground until SIGTERM or SIGINT (then drain and exit 0)."""
    options = node_start.NodeOptions(data=data, config=config, provider=provider)
    try:
        code = node_start.start(options)
    except node_start.OptionRefused as exc:
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None
    raise typer.Exit(code)
