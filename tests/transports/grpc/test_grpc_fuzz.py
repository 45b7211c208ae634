"""Fuzzed protobuf bytes to every method of every service on a live node: never UNKNOWN, never
INTERNAL, never a traceback or an error record in the node's log.

Three kinds of input per method: arbitrary bytes; fields built from the request's own field
numbers with random wire types and values (so the fuzzer gets past the first tag); and valid
encodings of the request, cut or with a byte changed. Derandomized (the same examples every
run) and bounded: ``REEL_FUZZ_EXAMPLES`` (default 40) per method and kind.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import pytest
from google.protobuf import message_factory  # type: ignore[import-untyped]
from grpclib.client import Channel
from grpclib.const import Status
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.transports.grpc.conftest import GrpcNode, start_node
from tests.transports.grpc.rawcall import Method, RawCodec, call, methods, varint
from tests.transports.records import Records

EXAMPLES = int(os.environ.get("REEL_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
REFUSED = (Status.UNKNOWN, Status.INTERNAL)


class Client:
    """One loop and one channel for the whole module (a call is a few milliseconds)."""

    def __init__(self, node: GrpcNode) -> None:
        self.node = node
        self.loop = asyncio.new_event_loop()

        async def connect() -> Channel:
            return Channel("127.0.0.1", node.server.port, codec=RawCodec())

        self.channel = self.loop.run_until_complete(connect())

    def status(self, method: Method, message: bytes) -> Status:
        streaming = method.cardinality.server_streaming
        coro = call(
            self.channel,
            method,
            self.node.metadata,
            message=message,
            timeout=0.3 if streaming else 5.0,
        )
        status: Status = self.loop.run_until_complete(coro)
        return status

    def close(self) -> None:
        self.channel.close()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    node = start_node(tmp_path_factory.mktemp("grpc-fuzz"))
    made = Client(node)
    try:
        yield made
    finally:
        made.close()
        node.close()


@pytest.fixture
def log() -> Iterator[Records]:
    with Records() as records:
        yield records
    assert not records.faults(), records.text()


def fields_of(method: Method) -> st.SearchStrategy[bytes]:
    """Concatenated fields: the request's numbers (and some others), any wire type, values
    that are well formed for that wire type about half of the time."""
    numbers = [f.number for f in method.request.fields] or [1]
    number = st.sampled_from(numbers) | st.integers(0, 2**29 + 3)
    wire = st.integers(0, 7)
    value = st.one_of(
        st.integers(0, 2**64 - 1).map(varint),
        st.binary(max_size=12).map(lambda b: varint(len(b)) + b),
        st.binary(min_size=4, max_size=4),
        st.binary(min_size=8, max_size=8),
        st.binary(max_size=6),
        st.text(max_size=8).map(lambda t: varint(len(t.encode())) + t.encode()),
    )
    field = st.tuples(number, wire, value).map(lambda f: varint(f[0] << 3 | f[1]) + f[2])
    return st.lists(field, max_size=5).map(b"".join)


def valid_of(method: Method) -> st.SearchStrategy[bytes]:
    """Valid encodings of the request (protobuf's own), with string and number fields set."""
    cls = message_factory.GetMessageClass(method.request)

    def build(values: dict[str, Any]) -> bytes:
        message = cls()
        for name, value in values.items():
            field = method.request.fields_by_name[name]
            if field.is_repeated or field.type == field.TYPE_MESSAGE:
                continue
            try:
                setattr(message, name, value)
            except (TypeError, ValueError):
                continue
        data: bytes = message.SerializeToString()
        return data

    scalar = st.one_of(
        st.text(max_size=30),
        st.integers(-(2**31), 2**31 - 1),
        st.booleans(),
        st.sampled_from(["01ARZ3NDEKTSV4RRFFQ69G5FAV", "", "x"]),
    )
    names = [f.name for f in method.request.fields]
    return st.dictionaries(st.sampled_from(names or ["_"]), scalar, max_size=4).map(
        lambda values: build({k: v for k, v in values.items() if k in names})
    )


def damaged(data: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """``data`` cut at any point, or with one byte replaced."""

    def cut(pair: tuple[bytes, int, int]) -> bytes:
        raw, at, byte = pair
        if not raw:
            return bytes([byte])
        at %= len(raw)
        return raw[:at] if byte % 2 else raw[:at] + bytes([byte]) + raw[at + 1 :]

    return st.tuples(data, st.integers(0, 1 << 16), st.integers(0, 255)).map(cut)


ALL = methods()


@pytest.mark.parametrize("method", ALL, ids=str)
def test_arbitrary_bytes(client: Client, log: Records, method: Method) -> None:
    @FUZZ
    @given(message=st.binary(max_size=48))
    def fuzz(message: bytes) -> None:
        assert client.status(method, message) not in REFUSED, message

    fuzz()


@pytest.mark.parametrize("method", ALL, ids=str)
def test_fields_with_any_wire_type(client: Client, log: Records, method: Method) -> None:
    @FUZZ
    @given(message=fields_of(method))
    def fuzz(message: bytes) -> None:
        assert client.status(method, message) not in REFUSED, message

    fuzz()


@pytest.mark.parametrize("method", ALL, ids=str)
def test_valid_encodings_cut_or_changed(client: Client, log: Records, method: Method) -> None:
    @FUZZ
    @given(message=valid_of(method) | damaged(valid_of(method)))
    def fuzz(message: bytes) -> None:
        assert client.status(method, message) not in REFUSED, message

    fuzz()
