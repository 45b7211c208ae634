"""What a tool declares about itself: `ToolSpec` and its vocabulary.

The spec is the contract the policy engine and the model see. The argument
schema is a frozen msgspec Struct; `ToolSpec.json_schema()` exports it as a
self-contained JSON schema object (`$defs` are inlined, so the result can be
handed to a model provider as a function's `parameters` as is).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

__all__ = [
    "CAPABILITIES",
    "Capability",
    "Posture",
    "Risk",
    "RuntimeKind",
    "ToolSpec",
    "inline_schema",
]

Capability = Literal[
    "fs.read", "fs.write", "net.egress", "process.exec", "secrets.read", "memory.write"
]
"""What a tool may touch; Cedar policies and approvals reason about these. ``memory.write``:
the tool records a durable memory item, which later runs (of other sessions, and of every
principal for a global item) are shown as reference material; it is sensitive, like
``fs.write``, because a fact written once steers runs long after the one that wrote it."""

CAPABILITIES: frozenset[str] = frozenset(
    ("fs.read", "fs.write", "net.egress", "process.exec", "secrets.read", "memory.write")
)

Risk = Literal["low", "medium", "high", "critical"]
Posture = Literal["always_allow", "ask_each_time", "disabled"]
RuntimeKind = Literal["builtin", "files", "http", "shell", "wasm", "mcp"]
"""Which runtime executes the tool (recorded by the tool actor)."""


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One tool's declaration. Immutable; built by the runtimes."""

    name: str
    """Dotted name, e.g. ``fs.read``; unique in a catalog."""
    description: str
    """One or two sentences for the model."""
    args_type: type[msgspec.Struct]
    """Frozen Struct with ``forbid_unknown_fields``; decoding it validates."""
    capabilities: frozenset[Capability]
    risk: Risk
    default_posture: Posture
    timeout_s: float
    """Wall-clock budget; the effective deadline is the earlier of this and the caller's."""
    output_cap_bytes: int
    """Upper bound on `ToolResult.output` in UTF-8 bytes."""
    runtime: RuntimeKind
    unavailable: str | None = None
    """Why the tool cannot run on this node (e.g. no working sandbox), or None. An unavailable
    tool is listed with its reason, its posture is ``disabled`` and its runtime refuses it."""
    parameters: dict[str, Any] | None = None
    """The argument schema as the tool's author declared it (an MCP server's ``inputSchema``),
    offered to the model instead of ``args_type``'s; None: ``args_type``'s."""
    validator: Callable[[Any], None] | None = None
    """A check of the decoded arguments (as plain JSON values) on top of ``args_type``, raising
    ValueError naming the field (an MCP tool's schema); `ToolCatalog.validate` runs it."""
    read_only: bool | Callable[[Any], bool] = False
    """Whether a call changes nothing (no file, no memory, no remote state), so the calls of one
    turn may run at once and one a crash cut off may run again (docs/tools.md, "Parallel
    read-only calls"): a constant, or a test of the validated arguments (``http.fetch``: GET
    only). The one home of the property: ask :meth:`reads_only`."""

    def reads_only(self, args: Any) -> bool:
        """Whether the call with the validated ``args`` is read-only (:attr:`read_only`)."""
        return self.read_only(args) if callable(self.read_only) else self.read_only

    def json_schema(self) -> dict[str, Any]:
        """The argument schema as one JSON schema object, `$defs` inlined."""
        if self.parameters is not None:
            return self.parameters
        return inline_schema(msgspec.json.schema(self.args_type))


def inline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace every ``{"$ref": "#/$defs/X"}`` by X's body and drop `$defs`.

    Tool argument types are never recursive, so inlining terminates; a
    recursive type is a programming error and raises ValueError.
    """
    defs: dict[str, Any] = schema.get("$defs", {})

    def resolve(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                key = ref.removeprefix("#/$defs/")
                if key in seen:
                    raise ValueError(f"recursive argument type {key!r} cannot be inlined")
                return resolve(defs[key], (*seen, key))
            return {k: resolve(v, seen) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [resolve(v, seen) for v in node]
        return node

    result: dict[str, Any] = resolve(schema, ())
    return result
