"""The gRPC transport's own exceptions (the tree is drawn in :mod:`transports.grpc`)."""

from __future__ import annotations


class GrpcTransportError(Exception):
    """Base of the errors this package raises on purpose."""


class GrpcStartError(GrpcTransportError):
    """The server could not start (address in use, bad host); the message names the key."""


class GrpcClientError(GrpcTransportError):
    """A client-side failure to reach or use a node (bad address, missing token file)."""
