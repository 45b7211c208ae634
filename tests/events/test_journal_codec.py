"""The payload codec: every catalog class round-trips; old versions upcast on read; unknown kinds
and newer versions are refused."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import (
    CATALOG,
    Journal,
    JournalReader,
    NodeKey,
    UnknownEventKind,
    decode,
    encode,
    kind_of,
    verify,
)
from events.catalog import RunAccepted, SessionCreated
from tests.events.journal_testkit import (
    JOURNAL,
    KEY,
    build_journal,
    fetch_row,
    head_hash,
    insert_row,
    seal,
)
from tests.events.journal_testkit import tamper as raw_connection

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def strategy_for(annotation: Any) -> st.SearchStrategy[Any]:
    """A strategy for one catalog field type (the small set of types the catalog uses)."""
    if annotation is Any:
        return JSON_VALUES
    if annotation is str:
        return st.text()
    if annotation is bool:
        return st.booleans()
    if annotation is bytes:
        return st.binary(max_size=64)
    if annotation is int:
        return st.integers(min_value=-(2**63), max_value=2**63 - 1)
    if annotation is float:
        return st.floats(allow_nan=False)
    origin = get_origin(annotation)
    if origin is Literal:
        return st.sampled_from(get_args(annotation))
    if origin in (Union, types.UnionType):
        return st.one_of([strategy_for(a) for a in get_args(annotation)])
    if annotation is type(None):
        return st.none()
    if origin is tuple:
        args = get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return st.lists(strategy_for(args[0]), max_size=4).map(tuple)
        return st.tuples(*(strategy_for(a) for a in args))
    if origin is list:
        return st.lists(strategy_for(get_args(annotation)[0]), max_size=4)
    if origin is dict:
        key, value = get_args(annotation)
        return st.dictionaries(strategy_for(key), strategy_for(value), max_size=4)
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return event_strategy(annotation)
    raise AssertionError(f"no strategy for catalog field type {annotation!r}")


def event_strategy(cls: type[msgspec.Struct]) -> st.SearchStrategy[Any]:
    hints = get_type_hints(cls)
    fields = {f.name: strategy_for(hints[f.name]) for f in msgspec.structs.fields(cls)}
    return st.builds(cls, **fields)


# No deadline: shared CI machines are slow and the suite asserts no timings.
EXAMPLES = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("cls", CATALOG, ids=kind_of)
@EXAMPLES
@given(data=st.data())
def test_every_catalog_class_round_trips(cls: type[Any], data: st.DataObject) -> None:
    event = data.draw(event_strategy(cls))
    payload = encode(event)
    decoded = decode(kind_of(cls), cls.version, payload)
    assert type(decoded) is cls
    assert decoded == event
    # The payload carries the kind tag itself (a reader of the bytes alone can route it).
    assert msgspec.msgpack.decode(payload)["kind"] == kind_of(cls)


@EXAMPLES
@given(text=st.text(), arguments=JSON_VALUES)
def test_unicode_text_and_nested_json_arguments_round_trip(text: str, arguments: Any) -> None:
    from events.catalog import ToolProposed

    event = ToolProposed(
        invocation_id=text, run_id="r", session_id="s", call_id="c", tool="t", arguments=arguments
    )
    assert decode("tool.proposed", 1, encode(event)) == event


def test_catalog_kinds_are_unique_and_dotted() -> None:
    kinds = [kind_of(cls) for cls in CATALOG]
    assert len(set(kinds)) == len(kinds)
    assert all("." in kind for kind in kinds)


def v1_session_created() -> bytes:
    """A ``session.created`` payload as reel v1 wrote it: ``key``, not ``session_key``."""
    return msgspec.msgpack.encode(
        {"kind": "session.created", "session_id": "s-old", "key": "legacy-key", "label": "old"}
    )


def test_v1_session_created_decodes_as_v2() -> None:
    assert SessionCreated.version == 2
    event = decode("session.created", 1, v1_session_created())
    assert event == SessionCreated(session_id="s-old", session_key="legacy-key", label="old")


def test_v1_row_in_a_journal_reads_upcast_and_still_verifies(data_dir: Path) -> None:
    key = build_journal(data_dir, runs=2)
    path = data_dir / JOURNAL
    payload = v1_session_created()
    with raw_connection(path) as conn:
        position, prev = head_hash(conn)
        template = fetch_row(conn, 1)
        insert_row(
            conn,
            seal(
                {
                    **template,
                    "position": position + 1,
                    "event_id": "01J00000000000000000000000",
                    "stream": "session/s-old",
                    "stream_seq": 0,
                    "kind": "session.created",
                    "version": 1,
                    "payload": payload,
                },
                prev,
            ),
        )
    # A journal keeps appending after the old row; the chain runs through it.
    with Journal(path, node_key=NodeKey.load(data_dir / KEY)) as journal:
        journal.append(
            "session/s-old",
            [RunAccepted(run_id="r", session_id="s-old", text="hi")],
            expected_seq=1,
        )
    reader = JournalReader.open(path)
    try:
        (stored, after) = reader.read_stream("session/s-old")
        assert (stored.kind, stored.version, stored.payload) == ("session.created", 1, payload)
        assert stored.decode() == SessionCreated(
            session_id="s-old", session_key="legacy-key", label="old"
        )
        assert isinstance(after.decode(), RunAccepted)
        report = verify(reader, trusted_public_key=key.public_key)
        assert report.ok, report.fault
        assert report.head_position == position + 3  # the old row, the append, the checkpoint
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("kind", "version", "payload", "words"),
    [
        ("no.such.kind", 1, b"\x80", "unknown event kind"),
        ("session.created", 3, msgspec.msgpack.encode({"kind": "session.created"}), "newer"),
        ("run.accepted", 0, msgspec.msgpack.encode({"kind": "run.accepted"}), "no upcaster"),
        ("run.accepted", 1, b"\xc1not msgpack", "not msgpack"),
        ("run.accepted", 1, msgspec.msgpack.encode({"kind": "run.accepted"}), "does not match"),
        (
            "run.accepted",
            1,
            encode(RunAccepted(run_id="r", session_id="s", text="t")).replace(
                b"run.accepted", b"run.xccepted"
            ),
            "does not match",
        ),
        ("run.started", 1, encode(RunAccepted(run_id="r", session_id="s", text="t")), "tagged"),
    ],
)
def test_undecodable_payloads_raise_unknown_event_kind(
    kind: str, version: int, payload: bytes, words: str
) -> None:
    with pytest.raises(UnknownEventKind, match=words) as info:
        decode(kind, version, payload)
    assert "\n" not in str(info.value)
