"""Raw calls to every gRPC method: bytes as the request message, frames as the test writes
them, the status as the server answers it. For the malformed-input and fuzz tests."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import dataclass
from typing import Any

from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]
from grpclib.client import Channel
from grpclib.const import Cardinality, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError
from grpclib.health.v1 import health_pb2
from grpclib.reflection.v1 import reflection_pb2
from grpclib.reflection.v1alpha import reflection_pb2 as reflection_v1alpha_pb2

from proto.reel.v1 import DESCRIPTOR_POOL

CARDINALITY = {
    (False, False): Cardinality.UNARY_UNARY,
    (False, True): Cardinality.UNARY_STREAM,
    (True, False): Cardinality.STREAM_UNARY,
    (True, True): Cardinality.STREAM_STREAM,
}


@dataclass(frozen=True)
class Method:
    path: str
    request: Any
    """The request message's descriptor."""
    cardinality: Cardinality

    def __str__(self) -> str:
        return self.path


def methods() -> list[Method]:
    """Every method the node serves (reel.v1, health, both reflection versions)."""
    services = [
        service
        for module in (health_pb2, reflection_pb2, reflection_v1alpha_pb2)
        for service in module.DESCRIPTOR.services_by_name.values()
    ]
    for name in ("reel/v1/gateway.proto", "reel/v1/approvals.proto", "reel/v1/journal.proto"):
        services.extend(DESCRIPTOR_POOL.FindFileByName(name).services_by_name.values())
    return [
        Method(
            f"/{service.full_name}/{method.name}",
            method.input_type,
            CARDINALITY[(method.client_streaming, method.server_streaming)],
        )
        for service in services
        for method in service.methods
    ]


class RawCodec(ProtoCodec):
    """Sends ``bytes`` as they are; hands replies back as bytes."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> Any:
        return data


def frame(payload: bytes, *, compressed: bool = False, length: int | None = None) -> bytes:
    """A gRPC message frame (flag, big-endian length, bytes); ``length`` may lie."""
    size = len(payload) if length is None else length
    return struct.pack(">?I", compressed, size) + payload


async def call(
    channel: Channel,
    method: Method,
    metadata: dict[str, str],
    *,
    message: bytes | None = None,
    raw_frame: bytes | None = None,
    timeout: float = 5.0,
) -> Status:
    """Send one request (``message`` framed, or ``raw_frame`` as is, or nothing) and end the
    stream; the call's status. A stream that answers is cancelled after its first reply."""
    try:
        # the client side streams whatever the method is, so it may send no message or two
        async with channel.request(
            method.path,
            Cardinality.STREAM_STREAM,
            bytes,
            bytes,
            timeout=timeout,
            metadata=metadata,
        ) as stream:
            await stream.send_request()
            if raw_frame is not None:
                await stream._stream.send_data(raw_frame, end_stream=True)  # the test's own frame
            elif message is not None:
                await stream.send_message(message, end=True)
            else:
                await stream.end()
            reply = await stream.recv_message()
            if reply is not None and method.cardinality.server_streaming:
                with contextlib.suppress(Exception):
                    await stream.cancel()
                return Status.OK
            await stream.recv_trailing_metadata()
            return Status.OK
    except GRPCError as exc:
        return exc.status
    except TimeoutError:  # the client's deadline (a stream with nothing to send yet)
        return Status.DEADLINE_EXCEEDED


def field_bytes(number: int, wire: int, value: bytes) -> bytes:
    """A tag and ``value`` as they are (the caller encodes lengths)."""
    return varint(number << 3 | wire) + value


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def length_delimited(number: int, payload: bytes) -> bytes:
    return field_bytes(number, 2, varint(len(payload)) + payload)


def first_string_field(descriptor: Any) -> Any | None:
    for field in descriptor.fields:
        if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
            return field
    return None


def run(coro: Any, loop: asyncio.AbstractEventLoop | None = None) -> Any:
    if loop is not None:
        return loop.run_until_complete(asyncio.wait_for(coro, 30))
    return asyncio.run(asyncio.wait_for(coro, 30))


def h2_call(port: int, path: str, metadata: list[tuple[bytes, bytes]], message: bytes = b"") -> int:
    """One gRPC call over a raw HTTP/2 connection whose metadata are bytes as given (grpclib's
    client refuses to send what is not printable ASCII); the ``grpc-status`` answered (0 once a
    stream answers a message), or -1 when the server ended the connection without one."""
    import socket

    import h2.config
    import h2.connection
    import h2.events

    config = h2.config.H2Configuration(client_side=True, header_encoding=None)
    conn = h2.connection.H2Connection(config)
    conn.initiate_connection()
    headers = [
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", path.encode()),
        (b":authority", b"127.0.0.1"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
        *metadata,
    ]
    conn.send_headers(1, headers)
    conn.send_data(1, frame(message), end_stream=True)
    status = -1
    ends = (h2.events.StreamEnded, h2.events.StreamReset, h2.events.ConnectionTerminated)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(conn.data_to_send())
        with contextlib.suppress(ConnectionError):
            while data := sock.recv(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                        status = int(dict(event.headers).get(b"grpc-status", status))
                    if isinstance(event, h2.events.DataReceived):
                        status = 0
                    if status != -1 or isinstance(event, ends):
                        return status
                sock.sendall(conn.data_to_send())
    return status
