"""The grpclib client side: addresses, the bearer token, and one RunStream conversation.

:class:`RunStreamClient` drives ``Gateway.RunStream`` directly over a grpclib stream (rather than
the generated stub's request iterator) so that sending approvals and cancels while receiving is
natural, and so the client half-closes its side when the server ends the run. ``reel chat``
and the tests use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from grpclib.client import Channel, Stream
from grpclib.const import Cardinality
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError

from proto.reel.v1 import (
    ApprovalDecision,
    ApprovalScope,
    CancelCurrentRun,
    Decision,
    GrantMatch,
    ResumeRun,
    RunStreamRequest,
    StartRun,
    TapeEvent,
)
from transports.grpc.errors import GrpcClientError

DEFAULT_ADDRESS = "127.0.0.1:8471"
RUN_STREAM = "/reel.v1.Gateway/RunStream"


def parse_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) as a pair; GrpcClientError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise GrpcClientError(f"--address: {address!r} is not host:port")
    return host.strip("[]"), int(port)


def auth_metadata(token: str) -> dict[str, str]:
    """Call metadata carrying the bearer token."""
    return {"authorization": f"Bearer {token}"}


def open_channel(address: str) -> Channel:
    """A grpclib channel to ``host:port`` (plaintext: the node binds loopback by default)."""
    host, port = parse_address(address)
    return Channel(host, port)


class RunStreamClient:
    """One RunStream: ``async with RunStreamClient(channel, token) as run:`` then
    ``await run.start(...)`` or ``await run.resume(...)``, iterate ``run.events()``, and send
    ``approve``/``cancel`` at any time. ``events()`` raises GRPCError when the server ends the
    stream with an error status."""

    def __init__(self, channel: Channel, token: str, *, timeout: float | None = None) -> None:
        self._channel = channel
        self._token = token
        self._timeout = timeout
        self._request: Any = None
        self._stream: Stream[RunStreamRequest, TapeEvent] | None = None
        self._ended = False
        self._reported = False
        self._finished = False
        """events() already raised the stream's error status: do not raise it again on exit."""

    async def __aenter__(self) -> RunStreamClient:
        self._request = self._channel.request(
            RUN_STREAM,
            Cardinality.STREAM_STREAM,
            RunStreamRequest,
            TapeEvent,
            timeout=self._timeout,
            metadata=auth_metadata(self._token),
        )
        self._stream = await self._request.__aenter__()
        await self._stream.send_request()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stream = self._stream
        if stream is not None and (exc is not None or not self._finished):
            # Leaving before the server ended the stream: reset it (the run goes on).
            with contextlib.suppress(Exception):
                await stream.cancel()
        try:
            await self._request.__aexit__(exc_type, exc, tb)
        except (GRPCError, ProtocolError, StreamTerminatedError):
            if not self._reported:
                raise

    @property
    def stream(self) -> Stream[RunStreamRequest, TapeEvent]:
        if self._stream is None:
            raise GrpcClientError("the stream is not open (use 'async with')")
        return self._stream

    async def send(self, message: RunStreamRequest) -> None:
        """Send any request message (tests use this for protocol violations)."""
        await self.stream.send_message(message)

    async def start(
        self,
        text: str,
        *,
        session_id: str | None = None,
        session_key: str | None = None,
        label: str = "",
        channel: str = "",
    ) -> None:
        if session_id is not None:
            start = StartRun(text=text, session_id=session_id, label=label, channel=channel)
        elif session_key is not None:
            start = StartRun(text=text, session_key=session_key, label=label, channel=channel)
        else:
            start = StartRun(text=text, new_session=True, label=label, channel=channel)
        await self.send(RunStreamRequest(start=start))

    async def resume(self, run_id: str, after_seq: int | None = None) -> None:
        await self.send(RunStreamRequest(resume=ResumeRun(run_id=run_id, after_seq=after_seq)))

    async def approve(
        self,
        approval_id: str,
        *,
        allow: bool = True,
        scope: ApprovalScope = ApprovalScope.ONCE,
        reason: str = "",
        match: GrantMatch = GrantMatch.ANY,
        prefix: str = "",
    ) -> None:
        decision = Decision.ALLOW if allow else Decision.DENY
        await self.send(
            RunStreamRequest(
                approval=ApprovalDecision(
                    approval_id=approval_id,
                    decision=decision,
                    scope=scope,
                    reason=reason,
                    match=match,
                    prefix=prefix,
                )
            )
        )

    async def cancel(self) -> None:
        await self.send(RunStreamRequest(cancel=CancelCurrentRun()))

    async def end(self) -> None:
        """Half-close: the client sends nothing more (the run's entries keep coming)."""
        if not self._ended:
            self._ended = True
            await self.stream.end()

    async def events(self) -> AsyncIterator[TapeEvent]:
        """The server's entries until it ends the stream; then its status (raised if not OK)."""
        stream = self.stream
        try:
            while True:
                message = await stream.recv_message()
                if message is None:
                    break
                yield message
            await self.end()
            await stream.recv_trailing_metadata()
            self._finished = True
        except StreamTerminatedError:
            self._finished = True
            # The server may reset the stream right after its error trailers (the client had
            # not half-closed): report the status those trailers carried, when they arrived.
            self._reported = True
            raise_status = getattr(stream, "_maybe_raise", None)
            if callable(raise_status):
                raise_status()
            raise
        except GRPCError:
            self._reported = self._finished = True
            if not self._ended:
                with contextlib.suppress(Exception):
                    await self.end()
            raise
