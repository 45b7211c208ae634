"""Errors as the gRPC API reports them: the one place where everything a handler can raise
becomes a gRPC status and a message naming the problem.

Handlers raise :class:`grpclib.exceptions.GRPCError` for what they detect themselves (bad
requests); :func:`to_grpc_error` gives reel's own exceptions the status of their kind
(:mod:`transports.failures`, through :data:`STATUS`). Anything unexpected becomes INTERNAL with
a generic message (never a traceback or a secret); the guard logs it
(:mod:`transports.grpc.guard`).
"""

from __future__ import annotations

from typing import Final

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from transports.failures import Kind, public

STATUS: Final[dict[Kind, Status]] = {
    "invalid_argument": Status.INVALID_ARGUMENT,
    "unauthenticated": Status.UNAUTHENTICATED,
    "permission_denied": Status.PERMISSION_DENIED,
    "not_found": Status.NOT_FOUND,
    "method_not_allowed": Status.UNIMPLEMENTED,
    "conflict": Status.FAILED_PRECONDITION,
    "budget_exceeded": Status.RESOURCE_EXHAUSTED,
    "already_exists": Status.ALREADY_EXISTS,
    "payload_too_large": Status.RESOURCE_EXHAUSTED,
    "unavailable": Status.UNAVAILABLE,
    "unusable": Status.INTERNAL,
    "internal": Status.INTERNAL,
}
"""Each kind of failure as a gRPC status."""


def to_grpc_error(exc: BaseException) -> GRPCError:
    """The status and message for any exception a handler let through."""
    if isinstance(exc, GRPCError):
        return exc
    failure = public(exc)
    return GRPCError(STATUS[failure.kind], failure.message)


def invalid(field: str, problem: str) -> GRPCError:
    """INVALID_ARGUMENT naming the request field."""
    return GRPCError(Status.INVALID_ARGUMENT, f"{field}: {problem}")


def beyond_head(after_position: int, head: int) -> None:
    """OUT_OF_RANGE for a position this journal has not reached (another node's, or made up):
    following it would wait, silently, for events that may never come."""
    if after_position > head:
        raise GRPCError(
            Status.OUT_OF_RANGE,
            f"after_position: {after_position} is beyond the journal's head ({head})",
        )


def not_found(what: str) -> GRPCError:
    """NOT_FOUND with ``what`` (e.g. "run '01H...'") in the message."""
    return GRPCError(Status.NOT_FOUND, f"{what} not found")
