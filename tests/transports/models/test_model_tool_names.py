"""Catalog tool names <-> OpenAI function names."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from transports.models.tool_names import ToolNameMap, encode_tool_name, is_wire_safe


def test_dotted_names_map_to_double_underscore_and_back() -> None:
    names = ToolNameMap(["fs.read", "memory.search", "echo"])

    assert names.to_wire("fs.read") == "fs__read"
    assert names.to_wire("echo") == "echo"
    assert names.from_wire("fs__read") == "fs.read"
    assert names.from_wire("memory__search") == "memory.search"


def test_names_that_would_collide_get_distinct_wire_names() -> None:
    names = ToolNameMap(["a.b", "a__b"])

    assert names.to_wire("a.b") != names.to_wire("a__b")
    assert names.from_wire(names.to_wire("a.b")) == "a.b"
    assert names.from_wire(names.to_wire("a__b")) == "a__b"


def test_long_and_odd_names_become_wire_safe() -> None:
    long_name = "plugin." + "x" * 100
    assert is_wire_safe(encode_tool_name(long_name))
    assert is_wire_safe(encode_tool_name("weird name/with spaces"))
    assert is_wire_safe(encode_tool_name(""))
    assert encode_tool_name("plugin." + "x" * 100) != encode_tool_name("plugin." + "x" * 101)


def test_unknown_wire_names_are_decoded_by_convention() -> None:
    assert ToolNameMap([]).from_wire("web__fetch") == "web.fetch"


@given(st.lists(st.text(min_size=0, max_size=80), max_size=8, unique=True))
def test_every_table_is_reversible_and_wire_safe(catalog: list[str]) -> None:
    names = ToolNameMap(catalog)
    wires = [names.to_wire(name) for name in catalog]

    assert all(is_wire_safe(wire) for wire in wires)
    assert len(set(wires)) == len(wires)
    assert [names.from_wire(wire) for wire in wires] == catalog
