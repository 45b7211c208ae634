"""The wire codec: protobuf, with a cap on inbound message size.

grpclib has no message size limit of its own; this codec refuses any inbound message larger than
``max_message_bytes`` with RESOURCE_EXHAUSTED before parsing it, naming both sizes. (The bytes
have been received by then: the cap bounds parsing and what handlers see, and HTTP/2 flow
control bounds how fast a client can push.)
"""

from __future__ import annotations

from typing import Any

from grpclib.const import Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError


class CappedProtoCodec(ProtoCodec):
    """``ProtoCodec`` that rejects inbound messages over ``max_message_bytes``."""

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
        return super().decode(data, message_type)
