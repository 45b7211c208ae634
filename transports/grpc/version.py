"""The build a gRPC client talks to: every response carries ``reel-version: <version>``
(:func:`transports.build.version`) in its trailing metadata, and in its initial metadata when it
sends some, on every method (server reflection and health included, with or without a token).

Server reflection has no field for the server's version (it describes services), so the
closest thing gRPC offers is response metadata: ``grpcurl -v`` prints it with the headers and
trailers of any call. Trailers, because a call that fails before its handler sends headers
(an unknown run, a missing token) answers with trailers only."""

from __future__ import annotations

from grpclib.events import SendInitialMetadata, SendTrailingMetadata, listen
from grpclib.server import Server

from transports.build import version

HEADER = "reel-version"


def announce_version(server: Server) -> None:
    """Make every response of ``server`` name the build in its metadata."""

    async def add(event: SendInitialMetadata | SendTrailingMetadata) -> None:
        event.metadata[HEADER] = version()

    listen(server, SendInitialMetadata, add)
    listen(server, SendTrailingMetadata, add)
