"""The wire codec: protobuf, with a cap on inbound message size and strict decoding.

grpclib has no message size limit of its own; this codec refuses any inbound message larger than
``max_message_bytes`` with RESOURCE_EXHAUSTED before parsing it, naming both sizes. (The bytes
have been received by then: the cap bounds parsing and what handlers see, and HTTP/2 flow
control bounds how fast a client can push.)

Bytes that are not an encoding of the method's request message (a wrong wire type, a truncated
varint, a length past the end, invalid UTF-8 in a string...) are INVALID_ARGUMENT naming the
field: :func:`transports.grpc.wire.check` vets them before betterproto2 (or protobuf, for the
health and reflection services) decodes them, so handlers only ever see well-typed messages.
"""

from __future__ import annotations

from typing import Any

from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from transports.grpc.wire import MalformedMessage, check


class CappedProtoCodec(ProtoCodec):
    """``ProtoCodec`` that rejects inbound messages over ``max_message_bytes`` or malformed."""

    def __init__(self, max_message_bytes: int) -> None:
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes: must be positive")
        self.max_message_bytes = max_message_bytes

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > self.max_message_bytes:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"message of {len(data)} bytes exceeds the server's max message size "
                f"({self.max_message_bytes} bytes, config key grpc.max_message_bytes)",
            )
        descriptor = getattr(message_type, "DESCRIPTOR", None)
        name = getattr(descriptor, "full_name", None) or getattr(message_type, "__name__", "")
        try:
            if descriptor is not None:
                check(data, descriptor)
            return super().decode(data, message_type)
        except MalformedMessage as exc:
            raise GRPCError(Status.INVALID_ARGUMENT, f"malformed {name} message: {exc}") from None
        except Exception as exc:  # a parser's complaint about bytes check() let through
            raise GRPCError(
                Status.INVALID_ARGUMENT, f"malformed {name} message ({type(exc).__name__})"
            ) from None
