"""Bytes that are not the method's request message, on every method of every service:
INVALID_ARGUMENT with a message naming the problem, exactly one log line, no traceback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from tests.transports.grpc.conftest import GrpcNode, run
from tests.transports.grpc.rawcall import (
    Method,
    RawCodec,
    call,
    field_bytes,
    first_string_field,
    frame,
    length_delimited,
    methods,
    varint,
)
from tests.transports.records import Records
from transports.grpc.wire import I64, LEN, VARINT, WIRE_OF_TYPE, MalformedMessage, check

MALFORMED = {
    "truncated varint": b"\x08\xff",
    "truncated tag": b"\x80",
    "varint over 64 bits": b"\x08" + b"\xff" * 9 + b"\x02",
    "varint over 10 bytes": b"\x08" + b"\xff" * 10 + b"\x01",
    "length past the end": b"\x0a\xff\xff\xff\xff\x0f",
    "length past the end by one": b"\x0a\x03ab",
    "group": b"\x0b\x0c",
    "wire type 7": b"\x0f",
    "field number 0": b"\x00\x01",
    "64-bit value cut short": b"\x09\x01\x02",
    "32-bit value cut short": b"\x0d\x01",
    "unknown field cut short": b"\xf8\x07",
}


def wrong_wire_type(method: Method) -> bytes:
    """The request's first field, sent with a wire type its type does not use."""
    field = method.request.fields[0]
    if field.type in (field.TYPE_STRING, field.TYPE_BYTES, field.TYPE_MESSAGE):
        return field_bytes(field.number, VARINT, varint(3))
    return length_delimited(field.number, b"abc")


@pytest.mark.parametrize("method", methods(), ids=str)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_bytes_are_invalid_argument(node: GrpcNode, method: Method, case: str) -> None:
    with Records() as log:
        status = run(_call(node, method, message=MALFORMED[case]))
    assert status == Status.INVALID_ARGUMENT, (method, case)
    assert len(log.refusals()) == 1, log.text()
    assert method.path in log.refusals()[0].getMessage()
    assert not log.faults(), log.text()


@pytest.mark.parametrize("method", methods(), ids=str)
def test_a_field_with_the_wrong_wire_type_is_invalid_argument_naming_it(
    node: GrpcNode, method: Method
) -> None:
    if not method.request.fields:
        pytest.skip(f"{method.request.full_name} has no fields")
    with Records() as log:
        status = run(_call(node, method, message=wrong_wire_type(method)))
    assert status == Status.INVALID_ARGUMENT
    line = log.refusals()[0].getMessage()
    assert f"{method.request.name}.{method.request.fields[0].name}" in line, line
    assert len(log.refusals()) == 1 and not log.faults(), log.text()


@pytest.mark.parametrize("method", methods(), ids=str)
def test_invalid_utf8_in_a_string_field_is_invalid_argument_naming_it(
    node: GrpcNode, method: Method
) -> None:
    field = first_string_field(method.request)
    if field is None:
        pytest.skip(f"{method.request.full_name} has no string field")
    with Records() as log:
        status = run(_call(node, method, message=length_delimited(field.number, b"ok \xff\xfe")))
    assert status == Status.INVALID_ARGUMENT
    line = log.refusals()[0].getMessage()
    assert f"{method.request.name}.{field.name}: not valid UTF-8" in line, line
    assert len(log.refusals()) == 1 and not log.faults(), log.text()


@pytest.mark.parametrize("method", methods(), ids=str)
@pytest.mark.parametrize(
    ("case", "raw"),
    [
        ("compressed flag", frame(b"", compressed=True)),
        ("frame cut short", frame(b"\x08\x01", length=100)),
        ("header cut short", b"\x00\x00\x00"),
    ],
)
def test_a_bad_frame_is_invalid_argument(
    node: GrpcNode, method: Method, case: str, raw: bytes
) -> None:
    with Records() as log:
        status = run(_call(node, method, raw_frame=raw))
    assert status == Status.INVALID_ARGUMENT, case
    assert len(log.refusals()) == 1, log.text()
    assert not log.faults(), log.text()


@pytest.mark.parametrize(
    "method", [m for m in methods() if not m.cardinality.client_streaming], ids=str
)
def test_a_unary_call_without_its_message_is_invalid_argument(
    node: GrpcNode, method: Method
) -> None:
    with Records() as log:
        status = run(_call(node, method))
    assert status == Status.INVALID_ARGUMENT
    assert "no request message" in log.refusals()[0].getMessage()
    assert not log.faults(), log.text()


def test_unknown_fields_are_ignored_when_well_formed(node: GrpcNode) -> None:
    method = next(m for m in methods() if m.path == "/reel.v1.Gateway/ListSessions")
    unknown = (
        field_bytes(99, VARINT, varint(7))
        + length_delimited(100, b"\xff\xfe not text: bytes of an unknown field")
        + field_bytes(101, 1, b"12345678")
        + field_bytes(102, 5, b"1234")
    )
    with Records() as log:
        assert run(_call(node, method, message=unknown)) == Status.OK
    assert not log.refusals() and not log.faults()


def test_unknown_enum_values_are_invalid_argument(node: GrpcNode) -> None:
    resolve = next(m for m in methods() if m.path == "/reel.v1.Approvals/Resolve")
    approval = length_delimited(1, b"01ARZ3NDEKTSV4RRFFQ69G5FAV")
    allow = field_bytes(2, VARINT, varint(1))
    for message in (
        approval + field_bytes(2, VARINT, varint(99)),
        approval + allow + field_bytes(3, VARINT, varint(77)),
        approval + field_bytes(2, VARINT, varint(2**64 - 1)),
    ):
        with Records() as log:
            assert run(_call(node, resolve, message=message)) == Status.INVALID_ARGUMENT
        assert not log.faults(), log.text()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/reel.v1.Approvals/List", field_bytes(1, VARINT, varint(2**64 - 1))),
        ("/reel.v1.Gateway/ListSessions", field_bytes(1, VARINT, varint(2**63))),
        ("/reel.v1.Gateway/ListSessions", field_bytes(1, VARINT, varint(2**31))),
        ("/reel.v1.Journal/Read", field_bytes(1, VARINT, varint(2**64 - 1))),
        ("/reel.v1.Journal/Read", field_bytes(1, VARINT, varint(2**63 - 1))),
        ("/reel.v1.Journal/Read", field_bytes(2, VARINT, varint(2**63 + 5))),
        ("/reel.v1.Approvals/Watch", field_bytes(1, VARINT, varint(2**63 - 1))),
    ],
)
def test_integers_at_the_edges_of_their_range_are_answered_not_internal(
    node: GrpcNode, path: str, message: bytes
) -> None:
    """Out-of-range integers are truncated as protobuf says; what they then mean is the
    handler's to judge (a negative position is INVALID_ARGUMENT), never INTERNAL."""
    method = next(m for m in methods() if m.path == path)
    with Records() as log:
        status = run(_call(node, method, message=message))
    assert status not in (Status.UNKNOWN, Status.INTERNAL), status
    assert not log.faults(), log.text()


def test_check_accepts_what_protobuf_encodes() -> None:
    from grpclib.reflection.v1 import reflection_pb2

    request = reflection_pb2.ServerReflectionRequest(
        host="h",
        file_containing_extension=reflection_pb2.ExtensionRequest(
            containing_type="x", extension_number=-5
        ),
    )
    check(request.SerializeToString(), request.DESCRIPTOR)
    with pytest.raises(MalformedMessage, match=r"file_containing_extension"):
        check(request.SerializeToString()[:-1], request.DESCRIPTOR)


async def _call(
    node: GrpcNode, method: Method, *, message: bytes | None = None, raw_frame: bytes | None = None
) -> Status:
    channel = Channel("127.0.0.1", node.server.port, codec=RawCodec())
    try:
        return await call(channel, method, node.metadata, message=message, raw_frame=raw_frame)
    finally:
        channel.close()


def test_identifiers_the_journal_would_refuse_are_invalid_argument(node: GrpcNode) -> None:
    from proto.reel.v1 import GatewayStub, ResolveSessionRequest

    async def scenario() -> list[Status]:
        channel = node.channel()
        statuses = []
        try:
            gateway = GatewayStub(channel, metadata=node.metadata)
            for key in ("a b", "x" * 200, "ghp_" + "A1b2" * 9):
                try:
                    await gateway.resolve_session(
                        ResolveSessionRequest(session_key=key, create=True)
                    )
                    statuses.append(Status.OK)
                except GRPCError as exc:
                    statuses.append(exc.status)
                    assert "session_key" in (exc.message or "") and key not in (exc.message or "")
            for start in ({"session_key": "a b"}, {"channel": "Not A Channel!"}):
                async with node.stream(channel) as stream:
                    await stream.start("hello", **start)
                    try:
                        async for _ in stream.events():
                            pass
                        statuses.append(Status.OK)
                    except GRPCError as exc:
                        statuses.append(exc.status)
        finally:
            channel.close()
        return statuses

    with Records() as log:
        assert run(scenario()) == [Status.INVALID_ARGUMENT] * 5
    assert not log.faults(), log.text()


def empty_value(field: Any) -> bytes:
    """``field`` with its type's zero value, as a sender that sets it would encode it."""
    if WIRE_OF_TYPE.get(field.type) == VARINT:
        return field_bytes(field.number, VARINT, varint(0))
    if WIRE_OF_TYPE.get(field.type) == LEN:
        return length_delimited(field.number, b"")
    width = 8 if WIRE_OF_TYPE[field.type] == I64 else 4
    return field_bytes(field.number, WIRE_OF_TYPE[field.type], b"\0" * width)


def doubled_oneofs(descriptor: Any, depth: int = 0) -> Iterator[tuple[str, bytes]]:
    """For every oneof of two or more members in ``descriptor`` and the messages it holds:
    the path of its second member and a message that sets its first two members."""
    for oneof in descriptor.oneofs:
        if len(oneof.fields) >= 2:
            first, second = oneof.fields[:2]
            yield second.name, empty_value(first) + empty_value(second)
    if depth < 3:
        for field in descriptor.fields:
            if field.type == field.TYPE_MESSAGE:
                for where, payload in doubled_oneofs(field.message_type, depth + 1):
                    yield f"{field.name}.{where}", length_delimited(field.number, payload)


DOUBLED = [
    (method, f"{method.request.name}.{where}", payload)
    for method in methods()
    for where, payload in doubled_oneofs(method.request)
]


def test_every_request_oneof_is_found() -> None:
    """The requests whose oneofs the check covers (a new oneof joins on its own)."""
    found = {(m.path, where) for m, where, _ in DOUBLED}
    assert ("/reel.v1.Gateway/RunStream", "RunStreamRequest.resume") in found
    assert ("/reel.v1.Gateway/RunStream", "RunStreamRequest.start.session_key") in found
    assert ("/reel.v1.Gateway/ResolveSession", "ResolveSessionRequest.session_key") in found


@pytest.mark.parametrize(("method", "where", "payload"), DOUBLED, ids=lambda v: str(v)[:60])
def test_two_members_of_a_oneof_are_invalid_argument_naming_the_field(
    node: GrpcNode, method: Method, where: str, payload: bytes
) -> None:
    with Records() as log:
        status = run(_call(node, method, message=payload))
    assert status == Status.INVALID_ARGUMENT, (method, where)
    line = log.refusals()[0].getMessage()
    assert f"{where}: " in line and "oneof" in line, line
    assert len(log.refusals()) == 1 and not log.faults(), log.text()


def test_the_issue_s_bytes_are_invalid_argument(node: GrpcNode) -> None:
    """``12 00 1a 00``: RunStreamRequest with resume and approval, both empty."""
    run_stream = next(m for m in methods() if m.path == "/reel.v1.Gateway/RunStream")
    with Records() as log:
        status = run(_call(node, run_stream, message=bytes.fromhex("12001a00")))
    assert status == Status.INVALID_ARGUMENT
    assert "RunStreamRequest.approval: " in log.refusals()[0].getMessage()
    assert not log.faults(), log.text()


def test_the_same_member_twice_is_merged_as_protobuf_says(node: GrpcNode) -> None:
    resolve = next(m for m in methods() if m.path == "/reel.v1.Gateway/ResolveSession")
    key = length_delimited(2, b"first") + length_delimited(2, b"second")
    with Records() as log:
        assert run(_call(node, resolve, message=key)) not in (
            Status.INVALID_ARGUMENT,
            Status.INTERNAL,
            Status.UNKNOWN,
        )
    assert not log.faults(), log.text()


def test_a_nested_field_is_named_by_its_path(node: GrpcNode) -> None:
    run_stream = next(m for m in methods() if m.path == "/reel.v1.Gateway/RunStream")
    start = length_delimited(4, b"hello \xc3")  # StartRun.text, cut inside a character
    with Records() as log:
        status = run(_call(node, run_stream, message=length_delimited(1, start)))
    assert status == Status.INVALID_ARGUMENT
    assert "RunStreamRequest.start.text: not valid UTF-8" in log.refusals()[0].getMessage()
    assert not log.faults(), log.text()
