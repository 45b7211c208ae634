"""Where a client command finds the running node: the addresses the node wrote to
``<data>/node.json`` once it listened (:mod:`transports.node.node_file`; whatever its config,
environment or ``--config`` said, port 0 included), else the data dir's ``config.toml`` with
its ``REEL_*`` overrides (``REEL_GRPC_PORT``, ``REEL_HTTP_PORT``, ...) as ``reel node`` reads
them; ``--address`` wins over both. A node bound to every interface (``0.0.0.0`` / ``::``) is
reached on loopback."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from transports.cli.errors import CliError
from transports.node.node_file import read_addresses

if TYPE_CHECKING:
    from transports.config import NodeConfig

_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _config(data_dir: Path) -> NodeConfig:
    """Read only when no node is running: the config module imports every package's settings
    (a tenth of a second) that a command against a running node does not need."""
    from transports.config import load_config

    return load_config(data_dir / "config.toml")


def _host(host: str) -> str:
    host = _ANY.get(host, host)
    return f"[{host}]" if ":" in host else host


def grpc_address(data_dir: Path) -> str:
    """``host:port`` of the node's gRPC listener."""
    running = read_addresses(data_dir)
    if running is not None:
        return f"{_host(running.grpc_host)}:{running.grpc_port}"
    grpc = _config(data_dir).grpc
    return f"{_host(grpc.host)}:{grpc.port}"


def http_base(data_dir: Path) -> str:
    """``http://host:port`` of the node's HTTP listener."""
    running = read_addresses(data_dir)
    if running is not None:
        return f"http://{_host(running.http_host)}:{running.http_port}"
    http = _config(data_dir).http
    return f"http://{_host(http.host)}:{http.port}"


def require_published(
    data_dir: Path,
    listener: Literal["HTTP", "GRPC"],
    hint: str,
    held: Callable[[], bool] = lambda: True,
) -> None:
    """Refuse (:class:`CliError`) to guess a held data dir's address: when its node published
    none (``node.json``), ``REEL_<listener>_PORT`` / ``_HOST`` name none in the caller's
    environment, and ``held()`` (a node holds the data dir). Such a holder is starting or runs
    without an API, and whoever listens on the config's port would be sent this data dir's
    token. ``hint``: what names an address instead."""
    named = os.environ.get(f"REEL_{listener}_PORT") or os.environ.get(f"REEL_{listener}_HOST")
    if read_addresses(data_dir) is None and not named and held():
        raise CliError(
            f"a node holds {data_dir} but its API cannot be reached: it has written no "
            f"node.json (it is still starting, or runs without an API; {hint} names one)"
        )
