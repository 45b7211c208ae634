"""Errors as the gRPC API reports them: the one place where everything a handler can raise
becomes a gRPC status and a message naming the problem.

Handlers raise :class:`grpclib.exceptions.GRPCError` for what they detect themselves (bad
requests); :func:`to_grpc_error` translates the actors' error tree and journal errors.
Unexpected exceptions become INTERNAL with a generic message (never a traceback or a secret).
"""

from __future__ import annotations

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from actors import (
    ActorsError,
    Conflict,
    InvalidCommand,
    NodeDraining,
    NotFound,
    SessionKeyTaken,
)
from events import AppendRejected, JournalClosed, JournalError, JournalUnavailable
from policies import PolicyRequestError
from transports.access import NotFound as AccessNotFound
from transports.access import PermissionDenied


def to_grpc_error(exc: BaseException) -> GRPCError:
    """The status and message for any exception a handler let through."""
    if isinstance(exc, GRPCError):
        return exc
    if isinstance(exc, PermissionDenied):
        return GRPCError(Status.PERMISSION_DENIED, str(exc))
    if isinstance(exc, AccessNotFound):
        return GRPCError(Status.NOT_FOUND, str(exc))
    if isinstance(exc, InvalidCommand | PolicyRequestError):
        return GRPCError(Status.INVALID_ARGUMENT, str(exc))
    if isinstance(exc, NotFound):
        return GRPCError(Status.NOT_FOUND, str(exc))
    if isinstance(exc, SessionKeyTaken):
        return GRPCError(Status.ALREADY_EXISTS, str(exc))
    if isinstance(exc, Conflict):
        return GRPCError(Status.FAILED_PRECONDITION, str(exc))
    if isinstance(exc, NodeDraining):
        return GRPCError(Status.UNAVAILABLE, str(exc))
    if isinstance(exc, AppendRejected):
        return GRPCError(Status.INVALID_ARGUMENT, f"the journal refused the input: {exc}")
    if isinstance(exc, JournalClosed | JournalUnavailable):
        return GRPCError(Status.UNAVAILABLE, "the journal is not available")
    if isinstance(exc, JournalError | ActorsError):
        return GRPCError(Status.INTERNAL, f"internal error ({type(exc).__name__})")
    return GRPCError(Status.INTERNAL, "internal error")


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
