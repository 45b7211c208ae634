"""What every call passes through once authenticated: reading the request, and the last word
on exceptions.

- Receiving: a request the server cannot read is INVALID_ARGUMENT with one log line naming the
  method and the problem (never a traceback, never the bytes): a malformed message (the codec's
  :class:`GRPCError`), a frame with the compressed flag (no compression is negotiated), a frame
  cut short, a unary call without its request message. grpclib would answer those with
  UNKNOWN and log a traceback per call.
- Whatever else a handler lets through gets the status of its kind
  (:func:`~transports.grpc.status.to_grpc_error`); an unexpected one is INTERNAL without
  details (logged with its traceback: it is a bug), never grpclib's UNKNOWN.
- Sending stops once the connection is gone (a handler that sends without waiting would write
  on, and asyncio logs a warning per write).
- A call the client cancelled (or dropped with its connection) ends by its CancelledError,
  however its handler ended: grpclib logs "Failed to handle cancellation" with a traceback for
  a cancelled handler that returns or raises anything else (a ``finally`` that awaits and
  swallows the cancellation, a status raised while cleaning up), and a client going away is
  no fault of the server's.

The hook is grpclib's ``RecvRequest`` event, whose ``method_func`` a listener may wrap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from grpclib.const import Cardinality, Status
from grpclib.events import RecvRequest, listen
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.server import Server

from transports.grpc.status import to_grpc_error

log = logging.getLogger("reel.grpc")

UNARY_REQUEST = (Cardinality.UNARY_UNARY, Cardinality.UNARY_STREAM)

MethodFunc = Callable[[Any], Coroutine[Any, Any, None]]


class CheckedStream:
    """A server stream whose receiving side turns every unreadable request into
    INVALID_ARGUMENT (and one log line), and whose sending side stops at a lost connection;
    everything else is the wrapped stream's."""

    def __init__(self, stream: Any, method: str, unary_request: bool) -> None:
        self._stream = stream
        self._method = method
        self._unary_request = unary_request
        self._received = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __aiter__(self) -> CheckedStream:
        return self

    async def __anext__(self) -> Any:
        message = await self.recv_message()
        if message is None:
            raise StopAsyncIteration
        return message

    async def recv_message(self) -> Any:
        try:
            message = await self._stream.recv_message()
        except GRPCError as exc:
            log.warning("refused a request to %s: %s", self._method, exc.message)
            raise
        except NotImplementedError:  # grpclib: the frame's compressed flag is set
            raise self._refuse("compressed messages are not supported") from None
        except AssertionError:  # grpclib: the stream ended inside a message frame
            raise self._refuse("the stream ended inside a message") from None
        if message is None and self._unary_request and not self._received:
            raise self._refuse("the call carries no request message")
        self._received += message is not None
        return message

    async def send_message(self, message: Any, **kwargs: Any) -> None:
        """Send, unless the connection is gone: a handler that sends page after page without
        waiting (a follower's backlog) would write to a dead socket until its task is cancelled,
        and asyncio logs "socket.send() raised exception." for each write after the fourth.
        Its end is a client gone (:class:`StreamTerminatedError`), as grpclib's own."""
        if self._stream._stream._transport.is_closing():  # as grpclib's own Stream tests it
            raise StreamTerminatedError("Connection lost")
        await self._stream.send_message(message, **kwargs)

    def _refuse(self, problem: str) -> GRPCError:
        log.warning("refused a request to %s: %s", self._method, problem)
        return GRPCError(Status.INVALID_ARGUMENT, problem)


def guard_calls(server: Server, cardinalities: Mapping[str, Cardinality]) -> None:
    """Wrap every call ``server`` serves (``cardinalities``: method path -> cardinality)."""

    async def wrap(event: RecvRequest) -> None:
        method_name = event.method_name
        unary = cardinalities.get(method_name) in UNARY_REQUEST
        event.method_func = _guarded(event.method_func, method_name, unary)  # type: ignore[assignment]

    listen(server, RecvRequest, wrap)


def _guarded(method_func: MethodFunc, method_name: str, unary_request: bool) -> MethodFunc:
    async def guarded(stream: Any) -> None:
        try:
            await method_func(CheckedStream(stream, method_name, unary_request))
        except Exception as exc:
            _end_if_cancelled()
            if isinstance(exc, GRPCError | StreamTerminatedError | ProtocolError | TimeoutError):
                raise  # statuses, a client gone, a deadline: grpclib's own handling
            error = to_grpc_error(exc)
            if error.status == Status.INTERNAL:
                log.error("internal error in %s", method_name, exc_info=exc)
            raise error from None
        _end_if_cancelled()

    return guarded


def _end_if_cancelled() -> None:
    """Raise CancelledError if this call's task was cancelled (the cancellation was swallowed
    or replaced on the way out): grpclib then ends the call quietly, as cancelled."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
