"""Bearer-token authentication for every RPC except the standard health service.

The token is the node's admin token (the same one the HTTP API takes), sent as
``authorization: Bearer <token>`` metadata. A missing or wrong token ends the call with
UNAUTHENTICATED before any handler runs. The token itself is never logged or echoed.
"""

from __future__ import annotations

from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from transports.auth import bearer_matches

OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without a token (load balancers and probes carry none)."""


def require_token(server: Server, token: str) -> None:
    """Make ``server`` refuse every call (but health checks) without ``Bearer <token>``."""

    async def check(event: RecvRequest) -> None:
        if event.method_name.startswith(OPEN_PREFIXES):
            return
        values = event.metadata.getall("authorization", [])
        header = values[0] if len(values) == 1 else None
        if not isinstance(header, str) or not bearer_matches(header, token):
            problem = "missing" if not values else "invalid"
            raise GRPCError(
                Status.UNAUTHENTICATED,
                f"{problem} bearer token: send 'authorization: Bearer <admin token>' metadata",
            )

    listen(server, RecvRequest, check)
