"""Where reel keeps its data: ``--data``, else ``$REEL_DATA``, else ``$XDG_DATA_HOME/reel``."""

from __future__ import annotations

import os
from pathlib import Path


def default_data_dir() -> Path:
    """``$REEL_DATA`` if set, otherwise the XDG data dir (``~/.local/share/reel``)."""
    explicit = os.environ.get("REEL_DATA")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "reel"


def resolve(data: Path | None) -> Path:
    """The data dir to use for a command given its ``--data`` option."""
    return (data if data is not None else default_data_dir()).expanduser()


def existing(data: Path | None) -> Path:
    """The data dir, which must already exist (commands that write to it offline), made
    private (:mod:`transports.node.private_dir`)."""
    from transports.cli.errors import CliError
    from transports.node.private_dir import make_private

    data_dir = resolve(data)
    if not data_dir.is_dir():
        raise CliError(f"no data dir at {data_dir} (start a node with --data {data_dir} first)")
    make_private(data_dir)  # as a node does at start
    return data_dir


def node_config(data_dir: Path) -> Path:
    """The config file ``reel node`` reads without ``--config``: ``$REEL_CONFIG``, else
    ``<data>/config.toml``. Offline writers read it for the journal's witness, so a node run
    with its config elsewhere has it found when ``REEL_CONFIG`` names it."""
    from transports.cli.errors import CliError

    explicit = os.environ.get("REEL_CONFIG")
    if not explicit:
        return data_dir / "config.toml"
    if not Path(explicit).is_file():
        raise CliError(f"REEL_CONFIG: no config file at {explicit}")
    return Path(explicit)


def journal_path(data_dir: Path) -> Path:
    """The journal file inside a data dir."""
    return data_dir / "journal.db"


def node_key_path(data_dir: Path) -> Path:
    """The node's Ed25519 key inside a data dir."""
    return data_dir / "node.key"
