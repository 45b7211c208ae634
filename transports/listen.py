"""Binding a server's listening socket, for the HTTP and the gRPC listener alike.

Both bind before they serve, so that a port already taken (or a host that is not this
machine's) is one clear line naming the config keys, the same for either listener: exit 2 from
``reel node``, never a traceback or an "internal error".
"""

from __future__ import annotations

import socket


def listening_socket(
    host: str, port: int, *, section: str, error: type[Exception]
) -> socket.socket:
    """A bound, listening TCP socket on ``host:port``; raises ``error`` with one line naming
    ``<section>.host`` and ``<section>.port`` when it cannot bind.

    Created with ``IPPROTO_TCP`` explicitly: asyncio sets TCP_NODELAY on accepted connections
    only then (without it, Nagle's algorithm and delayed ACKs hold small frames back by ~40 ms).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise error(
            f"cannot listen on {host}:{port} (config keys {section}.host, {section}.port): "
            f"{exc.strerror or exc}"
        ) from None
    return sock
