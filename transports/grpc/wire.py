"""Strict checking of protobuf wire bytes against the request message's descriptor.

betterproto2's parser is lenient where a server must not be: a known field sent with another
wire type decodes to a value of the wrong Python type (``page_size=[97, 98]``, ``start=3``), a
length prefix past the end is silently cut short, and a truncated varint, a short fixed-width
value or invalid UTF-8 raises whatever exception its code happens to hit. :func:`check` walks
the bytes once before they are decoded and raises :class:`MalformedMessage` naming the field
(``RunStreamRequest.start.text: not valid UTF-8``) for anything that is not a well-formed
encoding of the message:

- every tag is a varint of at most 10 bytes with a field number in 1..2**29-1;
- wire types 0 (varint), 1 (8 bytes), 2 (length-delimited, within the message), 5 (4 bytes)
  only; groups (3, 4) and the reserved 6, 7 are refused;
- a known field has its type's wire type (a repeated scalar may also be packed);
- ``string`` fields are UTF-8, message fields are checked recursively (depth at most 32);
- at most one member of a ``oneof`` is set (protobuf would keep the last, betterproto2 keeps
  both and a handler cannot tell which was meant); the same member twice merges, as protobuf
  says.

Unknown fields are skipped when well formed (forward compatibility). So betterproto2 only ever
decodes bytes whose every known field has the shape it expects.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor  # type: ignore[import-untyped]

MAX_DEPTH = 32
MAX_FIELD_NUMBER = (1 << 29) - 1

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
WIRE_NAMES = {
    VARINT: "a varint",
    I64: "a 64-bit value",
    LEN: "length-delimited bytes",
    SGROUP: "a group",
    EGROUP: "a group end",
    I32: "a 32-bit value",
}

F = FieldDescriptor
WIRE_OF_TYPE: dict[int, int] = {
    **dict.fromkeys(
        (
            F.TYPE_INT32,
            F.TYPE_INT64,
            F.TYPE_UINT32,
            F.TYPE_UINT64,
            F.TYPE_SINT32,
            F.TYPE_SINT64,
            F.TYPE_BOOL,
            F.TYPE_ENUM,
        ),
        VARINT,
    ),
    **dict.fromkeys((F.TYPE_FIXED64, F.TYPE_SFIXED64, F.TYPE_DOUBLE), I64),
    **dict.fromkeys((F.TYPE_FIXED32, F.TYPE_SFIXED32, F.TYPE_FLOAT), I32),
    **dict.fromkeys((F.TYPE_STRING, F.TYPE_BYTES, F.TYPE_MESSAGE), LEN),
    F.TYPE_GROUP: SGROUP,
}


class MalformedMessage(ValueError):
    """The bytes are not an encoding of the message; ``field`` is the path of the fault."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def check(data: bytes, descriptor: Any) -> None:
    """Raise :class:`MalformedMessage` unless ``data`` is a well-formed ``descriptor`` message."""
    _message(memoryview(data), 0, len(data), descriptor, descriptor.name, 0)


def _message(data: memoryview, pos: int, end: int, descriptor: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise MalformedMessage(path, f"nested deeper than {MAX_DEPTH} messages")
    fields = descriptor.fields_by_number
    chosen: dict[str, str] = {}  # oneof name -> the member this message set
    while pos < end:
        key, pos = _varint(data, pos, end, path, "a field tag")
        number, wire = key >> 3, key & 7
        if not 1 <= number <= MAX_FIELD_NUMBER:
            raise MalformedMessage(path, f"field number {number} is out of range")
        field = fields.get(number)
        where = f"{path}.{field.name}" if field is not None else f"{path} (field {number})"
        start = pos
        if wire == VARINT:
            _, pos = _varint(data, pos, end, where, "a varint")
        elif wire in (I64, I32):
            pos += 8 if wire == I64 else 4
            if pos > end:
                raise MalformedMessage(where, f"{WIRE_NAMES[wire]} is cut short")
        elif wire == LEN:
            length, start = _varint(data, pos, end, where, "a length")
            if length > end - start:
                raise MalformedMessage(
                    where, f"a length of {length} bytes runs past the end ({end - start} left)"
                )
            pos = start + length
        elif wire in (SGROUP, EGROUP):
            raise MalformedMessage(where, "groups (wire types 3 and 4) are not supported")
        else:
            raise MalformedMessage(where, f"wire type {wire} does not exist")
        if field is not None:
            _field(data, start, pos, wire, field, where, depth)
            _one_member(chosen, field, where)


def _field(
    data: memoryview, start: int, end: int, wire: int, field: Any, path: str, depth: int
) -> None:
    """The value of a known field, between ``start`` and ``end``, sent as ``wire``."""
    expected = WIRE_OF_TYPE.get(field.type, LEN)
    if wire != expected:
        if wire == LEN and field.is_repeated and expected != LEN:
            _packed(data, start, end, expected, path)
            return
        raise MalformedMessage(
            path, f"sent as {WIRE_NAMES[wire]} where its type needs {WIRE_NAMES[expected]}"
        )
    if field.type == F.TYPE_STRING:
        try:
            str(data[start:end], "utf-8")
        except UnicodeDecodeError:
            raise MalformedMessage(path, "not valid UTF-8") from None
    elif field.type == F.TYPE_MESSAGE:
        _message(data, start, end, field.message_type, path, depth + 1)


def _one_member(chosen: dict[str, str], field: Any, path: str) -> None:
    """Record ``field`` as its oneof's member; a second, different member is refused."""
    oneof = field.containing_oneof
    if oneof is None:
        return
    earlier = chosen.setdefault(oneof.name, field.name)
    if earlier != field.name:
        raise MalformedMessage(
            path,
            f"oneof {oneof.name} already has {earlier}: set one of its members, not two",
        )


def _packed(data: memoryview, pos: int, end: int, wire: int, path: str) -> None:
    """A packed repeated scalar: varints, or fixed-width values filling the bytes exactly."""
    if wire == VARINT:
        while pos < end:
            _, pos = _varint(data, pos, end, path, "a packed varint")
        return
    width = 8 if wire == I64 else 4
    if (end - pos) % width:
        raise MalformedMessage(path, f"packed values are not a multiple of {width} bytes")


def _varint(data: memoryview, pos: int, end: int, path: str, what: str) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it (at most 10 bytes, at most 64 bits)."""
    value = 0
    for index in range(10):
        if pos >= end:
            raise MalformedMessage(path, f"{what} is cut short")
        byte = data[pos]
        pos += 1
        if index == 9 and byte > 1:
            raise MalformedMessage(path, f"{what} is longer than 64 bits")
        value |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            return value, pos
    raise AssertionError("unreachable: the tenth byte ends the varint or raises")
