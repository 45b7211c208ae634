"""Bearer-token authentication for every RPC except the standard health service.

A call carries ``authorization: Bearer <token>`` metadata: the data dir's ``admin.token`` or a
token from ``reel tokens create`` / ``POST /v1/tokens`` (the same tokens the HTTP API takes).
A missing, unknown, expired or revoked token ends the call with UNAUTHENTICATED before any
handler runs, with one message for all of them (no oracle); the token itself is never logged
or echoed. The caller's :class:`~transports.access.tokens.Credentials` are set in a context variable
for the handler's task (and the tasks it starts): :func:`caller`.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Coroutine
from typing import Any

from grpclib.const import Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from transports.access.authority import Authority
from transports.access.tokens import Credentials, bearer

OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
"""Methods callable without a token (load balancers and probes carry none)."""

UNAUTHENTICATED = "a valid bearer token is required: send 'authorization: Bearer <token>' metadata"

_CALLER: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "reel_grpc_caller", default=None
)

MethodFunc = Callable[[Any], Coroutine[Any, Any, None]]


def caller() -> Credentials:
    """Who sent the call being served (set before its handler runs)."""
    who = _CALLER.get()
    if who is None:
        raise GRPCError(Status.UNAUTHENTICATED, UNAUTHENTICATED)
    return who


HEADER_ENCODING = "latin-1"
"""How the server decodes HTTP/2 header values: one character per byte, so any value decodes.
grpclib decodes them as ASCII, and a request with any other byte in a header dropped the whole
connection with a traceback; now a credential that is not ASCII reaches :func:`bearer` and is
refused (UNAUTHENTICATED), and other metadata is the handlers' to judge."""


def require_token(server: Server, authority: Authority) -> None:
    """Make ``server`` refuse every call (but health checks) without a valid bearer token."""
    server._h2_config.header_encoding = HEADER_ENCODING  # grpclib has no parameter for it

    async def check(event: RecvRequest) -> None:
        if event.method_name.startswith(OPEN_PREFIXES):
            return
        values = event.metadata.getall("authorization", [])
        header = values[0] if len(values) == 1 else None
        who = authority.authenticate(bearer(header) if isinstance(header, str) else None)
        if who is None:
            raise GRPCError(Status.UNAUTHENTICATED, UNAUTHENTICATED)
        event.method_func = _as(who, event.method_func)  # type: ignore[assignment]

    listen(server, RecvRequest, check)


def _as(who: Credentials, method_func: MethodFunc) -> MethodFunc:
    async def handle(stream: Any) -> None:
        _CALLER.set(who)
        await method_func(stream)

    return handle
