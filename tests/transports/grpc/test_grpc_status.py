"""The one mapping from the actors' errors to gRPC statuses says each thing once."""

from __future__ import annotations

from grpclib.const import Status

from actors import NodeDraining
from transports.grpc.status import to_grpc_error


def test_a_draining_node_is_unavailable_and_says_so_once() -> None:
    error = to_grpc_error(NodeDraining("the node is shutting down; not accepting runs"))
    assert error.status == Status.UNAVAILABLE
    assert error.message == "the node is shutting down; not accepting runs"
