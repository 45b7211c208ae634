"""The descriptors server reflection serves: reel.v1's files plus the standard health and
reflection protos, in one pool of their own (the generated pool stays untouched)."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool  # type: ignore[import-untyped]
from grpclib.health.v1 import health_pb2
from grpclib.reflection.v1 import reflection_pb2

from proto.reel.v1 import DESCRIPTOR_POOL

REEL_FILES = (
    "reel/v1/tape.proto",
    "reel/v1/gateway.proto",
    "reel/v1/approvals.proto",
    "reel/v1/journal.proto",
)
"""Dependencies first: ``tape.proto`` is imported by the others."""


def reflection_pool() -> Any:
    """A descriptor pool describing every service the server offers."""
    pool = descriptor_pool.DescriptorPool()
    for module in (health_pb2, reflection_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    for name in REEL_FILES:
        proto = descriptor_pb2.FileDescriptorProto()
        DESCRIPTOR_POOL.FindFileByName(name).CopyToProto(proto)
        pool.Add(proto)
    return pool
