"""The internal service a cluster node runs forwarded commands on: gRPC (grpclib) on its own
port (``[cluster] host``/``port``), one unary method whose messages are msgpack
(:mod:`.wire`), not protobuf: only reel's nodes speak it.

A forward is run only when its signature verifies under the public key of the sender's live
``nodes`` row (the incarnation it names), it was sent within :data:`MAX_AGE_MS` of now, and its
nonce was not seen in that window (a captured forward replayed is refused). Authenticating the
caller (its token) and Cedar's decision happened on the node the client spoke to; the owner
runs the command as that principal. A command for a shard this node does not serve is answered
:class:`events.errors.ShardNotOwned`: the sender looks the owner up again. An append (to a stream
no session homes: a token's, a memory item's) is queued on this node's journal as the sender
prepared it; it too is refused when this node does not hold the stream's shard.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from grpclib.const import Cardinality, Handler
from grpclib.encoding.base import CodecBase
from grpclib.server import Server, Stream

from events.envelope import AppendResult
from events.errors import ShardNotOwned
from events.postgres.reader import Member
from events.sqlite.journal import AppendRequest
from transports.cluster.errors import ForwardRefused
from transports.cluster.targets import Target, describe, served
from transports.cluster.wire import (
    Answer,
    Forward,
    ForwardedAppend,
    answer_of,
    command_of,
    failure_of,
)

PATH = "/reel.cluster.v1.Cluster/Forward"
MAX_AGE_MS = 30_000
"""How old (or how far ahead, clocks differ) a forward may be; its nonce is kept this long."""
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class MsgpackCodec(CodecBase):
    """Bytes in, bytes out: the messages are msgpack made by :mod:`.wire`."""

    __content_subtype__ = "msgpack"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


class ForwardService:
    """Runs forwarded commands on this node. ``member(node)``: the sender's live row;
    ``target(command)``: where it runs (:mod:`.targets`); ``ready()``: the shards served here;
    ``running(name)``: whether singleton ``name``'s work (a channel) runs here; ``send``: runs
    a command here (the node's own directory, :meth:`actors.system.node.Node.send_here`, or a
    channel's hub); ``append``: this node's journal's
    (:meth:`events.postgres.journal.PostgresJournal.submit_forwarded`); ``position()``: how far
    this node's journal has committed."""

    def __init__(
        self,
        *,
        member: Callable[[str], Member | None],
        target: Callable[[Any], Target],
        ready: Callable[[], frozenset[int]],
        running: Callable[[str], bool],
        send: Callable[[Any], Future[Any]],
        append: Callable[[AppendRequest], Future[AppendResult]],
        position: Callable[[], int],
    ) -> None:
        self._member = member
        self._append = append
        self._target = target
        self._ready = ready
        self._running = running
        self._send = send
        self._position = position
        self._seen: dict[bytes, float] = {}
        self.served = 0
        """Forwarded commands run here (``/metrics``)."""

    def __mapping__(self) -> dict[str, Handler]:
        return {PATH: Handler(self.forward, Cardinality.UNARY_UNARY, bytes, bytes)}

    async def forward(self, stream: Stream[bytes, bytes]) -> None:
        data = await stream.recv_message()
        assert data is not None
        answer = await self._answer(data)
        await stream.send_message(msgspec.msgpack.encode(answer))

    async def _answer(self, data: bytes) -> Answer:
        try:
            forward = msgspec.msgpack.decode(data, type=Forward)
            await self._check(forward)
            command = command_of(forward)
            if isinstance(command, ForwardedAppend):
                return await self._append_here(command)
            where = await asyncio.to_thread(self._target, command)
        except ForwardRefused as exc:
            return failure_of(exc)
        except (msgspec.ValidationError, msgspec.DecodeError, KeyError):
            return failure_of(ForwardRefused("not a forwarded command this node can read"))
        except Exception as exc:  # the journal away while looking the shard up
            return failure_of(exc)
        if not served(where, self._ready(), self._running):
            return failure_of(ShardNotOwned(f"{describe(where)} is not served here now"))
        self.served += 1
        try:
            value = await asyncio.wrap_future(self._send(command))
        except Exception as exc:
            return failure_of(exc, self._position())
        return answer_of(value, self._position())

    async def _append_here(self, append: ForwardedAppend) -> Answer:
        self.served += 1
        try:
            result = await asyncio.wrap_future(self._append(append.request()))
        except Exception as exc:
            return failure_of(exc, self._position())
        return answer_of(msgspec.structs.replace(result, events=()), self._position())

    async def _check(self, forward: Forward) -> None:
        now_ms = time.time_ns() // 1_000_000
        if abs(now_ms - forward.sent_at_ms) > MAX_AGE_MS:
            raise ForwardRefused(f"a forward from {forward.node} sent too long ago")
        member = await asyncio.to_thread(self._member, forward.node)
        if member is None or member.incarnation != forward.incarnation or not member.public_key:
            raise ForwardRefused(f"no live node {forward.node} of that incarnation")
        try:
            Ed25519PublicKey.from_public_bytes(member.public_key).verify(
                forward.signature, forward.signed_part()
            )
        except (InvalidSignature, ValueError):
            raise ForwardRefused(f"a forward not signed by node {forward.node}'s key") from None
        now = time.monotonic()
        self._seen = {n: t for n, t in self._seen.items() if t > now}
        if forward.nonce in self._seen:
            raise ForwardRefused(f"a forward from {forward.node} replayed")
        self._seen[forward.nonce] = now + 2 * MAX_AGE_MS / 1000


async def serve(service: ForwardService, sock: socket.socket) -> Server:
    """Start serving ``service`` on the bound ``sock`` (on the node's I/O loop)."""
    server = Server([service], codec=MsgpackCodec())
    await server.start(sock=sock)
    return server


async def close(server: Server) -> None:
    server.close()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(server.wait_closed(), 5.0)
