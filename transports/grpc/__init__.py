"""reel's gRPC transport: grpclib serving reel.v1 (Gateway, Approvals, Journal), health and
reflection on the node's I/O loop, and the grpclib client ``reel chat`` uses.

Public surface::

    from transports.grpc import start_grpc, GrpcServer        # in the node
    from transports.grpc import RunStreamClient, open_channel  # clients

The API is documented in docs/grpc-api.md; statuses come from one mapping
(:mod:`transports.grpc.status`). Request bytes are checked against the method's message before
decoding (:mod:`transports.grpc.wire`, via the codec) and every call's receiving side and last
resort are guarded (:mod:`transports.grpc.guard`): bad input is INVALID_ARGUMENT with one log
line, never UNKNOWN or a traceback.

Exceptions::

    GrpcTransportError
    ├── GrpcStartError        the server cannot listen (address in use, bad host)
    └── GrpcClientError       a client cannot reach or use a node (address, token file)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from events.lazy import exports

if TYPE_CHECKING:
    from transports.grpc.client import (
        DEFAULT_ADDRESS,
        RunStreamClient,
        auth_metadata,
        open_channel,
        parse_address,
    )
    from transports.grpc.errors import GrpcClientError, GrpcStartError, GrpcTransportError
    from transports.grpc.server import GrpcServer, start_grpc

__all__ = [
    "DEFAULT_ADDRESS",
    "GrpcClientError",
    "GrpcServer",
    "GrpcStartError",
    "GrpcTransportError",
    "RunStreamClient",
    "auth_metadata",
    "open_channel",
    "parse_address",
    "start_grpc",
]

# Lazily (events.lazy): the node never loads the client (grpclib's client side), a client never
# the server and the services.
__getattr__ = exports(
    __name__,
    {
        "transports.grpc.client": (
            "DEFAULT_ADDRESS",
            "RunStreamClient",
            "auth_metadata",
            "open_channel",
            "parse_address",
        ),
        "transports.grpc.errors": ("GrpcClientError", "GrpcStartError", "GrpcTransportError"),
        "transports.grpc.server": ("GrpcServer", "start_grpc"),
    },
)
