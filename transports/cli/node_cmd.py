"""``reel node``: run the daemon in the foreground."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import typer

from transports.cli.data_dir import resolve
from transports.cli.options import DataOption

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="config.toml to read (default: <data>/config.toml)."),
]
ProviderOption = Annotated[
    str | None,
    typer.Option("--provider", help="Model provider: deterministic or openai (overrides config)."),
]


def node(
    data: DataOption = None, config: ConfigOption = None, provider: ProviderOption = None
) -> None:
    """Run the node in the foreground until SIGTERM or SIGINT (then drain and exit 0)."""
    from transports.config import load_config
    from transports.daemon import serve

    data_dir = resolve(data)
    if config is not None and not config.is_file():
        raise typer.BadParameter(f"no config file at {config}", param_hint="--config")
    cfg = load_config(config or data_dir / "config.toml")
    if provider is not None:
        if provider not in ("deterministic", "openai"):
            raise typer.BadParameter("must be deterministic or openai", param_hint="--provider")
        cfg = msgspec.structs.replace(
            cfg, provider=msgspec.structs.replace(cfg.provider, kind=provider)
        )
    raise typer.Exit(serve(data_dir, config=cfg))
