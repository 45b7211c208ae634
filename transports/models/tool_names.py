"""Reversible mapping between catalog tool names and OpenAI function names.

OpenAI function names must match ``^[a-zA-Z0-9_-]{1,64}$``, while reel's catalog uses dotted
names (``fs.read``). On the way out a dot becomes ``__`` (``fs.read`` -> ``fs__read``); any other
character outside the allowed set becomes ``_``, and a name longer than 64 characters is cut and
given a hash suffix. The mapping is built per request from the names the request carries, so the
way back is a table look-up and is exact even when the encoding alone would be ambiguous; two
catalog names that would encode alike are told apart by a hash suffix. A name the model invents
(not in the table) is decoded by turning ``__`` back into dots, so the run loop can report it as
an unknown tool under a recognisable name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

__all__ = ["ToolNameMap", "encode_tool_name", "is_wire_safe"]

_WIRE_SAFE = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_UNSAFE_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LEN = 64
_HASH_LEN = 8


def is_wire_safe(name: str) -> bool:
    """Whether ``name`` is acceptable as an OpenAI function name as it stands."""
    return _WIRE_SAFE.fullmatch(name) is not None


def _hashed(prefix: str, name: str) -> str:
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:_HASH_LEN]
    return f"{prefix[: _MAX_LEN - _HASH_LEN - 1]}_{digest}"


def encode_tool_name(name: str) -> str:
    """The wire form of one catalog name, without regard to other names."""
    encoded = _UNSAFE_CHAR.sub("_", name.replace(".", "__"))
    if not encoded:
        return _hashed("tool", name)
    if len(encoded) > _MAX_LEN:
        return _hashed(encoded, name)
    return encoded


class ToolNameMap:
    """The name table for one request: catalog name <-> wire name, both ways, exactly."""

    def __init__(self, names: Iterable[str]) -> None:
        self._to_wire: dict[str, str] = {}
        self._from_wire: dict[str, str] = {}
        for name in names:
            self._add(name)

    def _add(self, name: str) -> str:
        known = self._to_wire.get(name)
        if known is not None:
            return known
        wire = encode_tool_name(name)
        if wire in self._from_wire:
            wire = _hashed(wire, name)
        self._to_wire[name] = wire
        self._from_wire[wire] = name
        return wire

    def to_wire(self, name: str) -> str:
        """The wire name for ``name``; a name not seen before is added to the table."""
        return self._add(name)

    def from_wire(self, wire: str) -> str:
        """The catalog name for a wire name the model sent back."""
        known = self._from_wire.get(wire)
        if known is not None:
            return known
        return wire.replace("__", ".")
