"""The connection handler: aiohttp's, with reel's answer to a request aiohttp cannot parse.

aiohttp answers a request it cannot parse (a malformed request line or header line, a bad chunk
size, a body that does not decompress) itself, before routing and middleware: a ``text/plain``
400 whose body is the parser's message, which quotes the offending bytes (an ``Authorization``
header line included), and a log record with a traceback. aiohttp has no hook for that response
(aio-libs/aiohttp#3287, #9882): the only seam is the connection handler's ``handle_error`` and
``log_exception``. So :class:`Runner` serves the application through :class:`Protocol`, which
answers with the API's JSON error naming only the kind of fault, and logs a client's fault as
one line without a traceback or any request bytes.

The seam is aiohttp's (``AppRunner._make_server``, ``Server.__call__``): aiohttp is pinned, and
``tests/transports/http/test_http_edges.py`` sends malformed requests over a raw socket.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from transports.failures import Kind
from transports.http.failures import ApiError, error_response

log = logging.getLogger("reel.http")

CLIENT_FAULTS = (HttpProcessingError, web.RequestPayloadError)
"""What a client's bytes cause: never a traceback in the log."""


class Protocol(web.RequestHandler):
    """One connection, as aiohttp serves it, but with reel's error answers and log lines."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # ``message`` is the parser's text, which quotes the request: never used
        if request.writer.output_size > 0:  # as aiohttp: a response is under way, drop it
            raise ConnectionError("a response is already being sent")
        kind = type(exc).__name__ if exc is not None else "error"
        if status >= 500:
            log.error("internal error on a request (%s)", kind, exc_info=exc)
            error = ApiError("internal", "internal error")
        else:
            log.warning("refused a malformed HTTP request (%s)", kind)
            refused: Kind = "payload_too_large" if status == 413 else "invalid_argument"
            error = ApiError(refused, f"the request is not valid HTTP/1.1 ({kind})")
        response = error_response(error)
        response.force_close()
        return response

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, CLIENT_FAULTS):
            # e.g. the rest of a body that failed to decode, drained after the 400 was sent
            log.warning("refused a malformed HTTP request (%s)", type(exc).__name__)
            return
        super().log_exception(*args, **kw)


class _Server(web.Server):
    """aiohttp's protocol factory, making :class:`Protocol` connections."""

    @classmethod
    def adopting(cls, server: web.Server) -> _Server:
        """The same server (handler, request factory, connection settings), with our protocol."""
        return cls(
            server.request_handler,
            request_factory=server.request_factory,
            handler_cancellation=server.handler_cancellation,
            loop=server._loop,
            **server._kwargs,
        )

    def __call__(self) -> web.RequestHandler:
        return Protocol(self, loop=self._loop, **self._kwargs)


class Runner(web.AppRunner):
    """``web.AppRunner`` whose connections are :class:`Protocol` handlers."""

    async def _make_server(self) -> web.Server:
        return _Server.adopting(await super()._make_server())
