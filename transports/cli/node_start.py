"""``reel node`` from its options to a serving node, with or without typer.

Start-up is a target for ``reel node`` (issue 23: ready within a second at a million events), and
typer costs it a twentieth of that or more: importing typer and click, and building the command
tree before the command runs. So a command line of only ``--data``, ``--config`` and
``--provider`` (each once, with a value) is read here, and :func:`start` runs the node without
importing typer. Anything else (``--help``, another or a repeated option, a value typer would
refuse) goes through typer as before (``transports.cli.node_cmd``, which calls the same
:func:`start`), so help and every usage error stay typer's, word for word.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import msgspec

from transports.cli.data_dir import resolve

PROVIDERS = ("deterministic", "openai")
"""What ``--provider`` may name."""

_OPTIONS = ("--data", "--config", "--provider")


class NodeOptions(NamedTuple):
    """``reel node``'s options as given (``config``: ``--config``, else ``$REEL_CONFIG``)."""

    data: Path | None = None
    config: Path | None = None
    provider: str | None = None


class OptionRefused(Exception):
    """An option's value is refused (``option``: the option, ``str()``: why), before anything
    was opened: typer's path reports it as its usage error."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


def read(argv: list[str]) -> NodeOptions | None:
    """``reel node``'s options when ``argv`` (without the program) is ``node`` and nothing but
    ``--data``, ``--config`` and ``--provider``, each at most once, as ``--name value`` or
    ``--name=value``, a value that is not empty and does not start with ``-``; else None (typer
    reads it)."""
    if not argv or argv[0] != "node":
        return None
    given: dict[str, str] = {}
    rest = argv[1:]
    while rest:
        name, equals, value = rest[0].partition("=")
        if name not in _OPTIONS or name in given:
            return None
        if not equals:
            if len(rest) < 2:
                return None
            value = rest[1]
        rest = rest[1 if equals else 2 :]
        if not value or value.startswith("-"):
            return None
        given[name] = value
    # typer's --config falls back to $REEL_CONFIG when it is set and not empty.
    config = given.get("--config") or os.environ.get("REEL_CONFIG") or None
    data = given.get("--data")
    return NodeOptions(
        data=Path(data) if data else None,
        config=Path(config) if config else None,
        provider=given.get("--provider"),
    )


def chosen_config(data_dir: Path, config: Path | None) -> Path:
    """The config file ``reel node`` reads: ``--config`` (or ``$REEL_CONFIG``), which must
    exist (else :class:`OptionRefused`), else ``<data>/config.toml`` (which may not: the
    embedded defaults)."""
    if config is not None and not config.is_file():
        raise OptionRefused("--config", f"no config file at {config}")
    return config or data_dir / "config.toml"


def start(options: NodeOptions) -> int:
    """Serve the data dir until SIGTERM or SIGINT (``transports.node.daemon.serve``); its exit
    code. Raises :class:`OptionRefused` for a ``--config`` that is not a file or a
    ``--provider`` not in :data:`PROVIDERS` (after the config is read: a config error is told
    first), ConfigError and whatever else ``serve`` raises when the node cannot start."""
    from transports.config import load_config

    data_dir = resolve(options.data)
    config_file = chosen_config(data_dir, options.config)
    cfg = load_config(config_file)
    provider = options.provider
    if provider is not None:
        if provider not in PROVIDERS:
            raise OptionRefused("--provider", f"must be {' or '.join(PROVIDERS)}")
        cfg = msgspec.structs.replace(
            cfg, provider=msgspec.structs.replace(cfg.provider, kind=provider)
        )
    from transports.node.daemon import serve  # after the config: a bad one is told at once

    return serve(data_dir, config=cfg, config_path=config_file)
