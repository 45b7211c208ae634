"""Where a client command finds the running node: the data dir's ``config.toml`` with its
``REEL_*`` overrides (``REEL_GRPC_PORT``, ``REEL_HTTP_PORT``, ...), exactly as ``reel node``
reads them, unless ``--address`` says otherwise. A node bound to every interface
(``0.0.0.0`` / ``::``) is reached on loopback."""

from __future__ import annotations

from pathlib import Path

from transports.config import NodeConfig, load_config

_ANY = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def _config(data_dir: Path) -> NodeConfig:
    return load_config(data_dir / "config.toml")


def _host(host: str) -> str:
    host = _ANY.get(host, host)
    return f"[{host}]" if ":" in host else host


def grpc_address(data_dir: Path) -> str:
    """``host:port`` of the node's gRPC listener."""
    grpc = _config(data_dir).grpc
    return f"{_host(grpc.host)}:{grpc.port}"


def http_base(data_dir: Path) -> str:
    """``http://host:port`` of the node's HTTP listener."""
    http = _config(data_dir).http
    return f"http://{_host(http.host)}:{http.port}"
