"""Where the running node listens, for client commands on the same data dir: ``<data>/node.json``.

``reel node`` writes it once both listeners are bound (the ports actually bound, so a port of
0 in the config, ``REEL_HTTP_PORT``, or a ``--config`` elsewhere are all found), and removes it
when it stops; a start removes one a killed node left. Client commands read it first and fall
back to the data dir's config (:mod:`transports.cli.node_address`). A file whose ``pid`` is no
longer a live process is ignored: a node killed with ``kill -9`` leaves it behind.

It is written whole (a temporary file renamed over it), mode 0600, and holds no secret.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import msgspec

NODE_FILE = "node.json"


class NodeAddresses(msgspec.Struct, frozen=True, kw_only=True):
    """Where one node process listens."""

    pid: int
    http_host: str
    """As bound (``0.0.0.0`` included: clients map it to loopback)."""
    http_port: int
    grpc_host: str
    grpc_port: int


def node_file(data_dir: Path) -> Path:
    return data_dir / NODE_FILE


def write_addresses(data_dir: Path, addresses: NodeAddresses) -> None:
    """Replace ``node.json`` with ``addresses`` (atomically)."""
    path = node_file(data_dir)
    tmp = path.with_name(f"{NODE_FILE}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, msgspec.json.encode(addresses) + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)


def remove_addresses(data_dir: Path, pid: int | None = None) -> None:
    """Remove ``node.json`` (only when it is ``pid``'s, if given); idempotent."""
    if pid is not None:
        found = read_addresses(data_dir)
        if found is None or found.pid != pid:
            return
    with contextlib.suppress(FileNotFoundError):
        node_file(data_dir).unlink()


def read_addresses(data_dir: Path) -> NodeAddresses | None:
    """The addresses of the node that wrote ``node.json``, or None: no file, a file that does
    not parse, or its process is gone."""
    try:
        addresses = msgspec.json.decode(node_file(data_dir).read_bytes(), type=NodeAddresses)
    except (OSError, msgspec.DecodeError):
        return None
    return addresses if _alive(addresses.pid) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    except OSError:
        return False
    return True
