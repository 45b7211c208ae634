"""`ToolCatalog`: the tools by name, argument validation, and the execution boundary.

`execute` is the one place where a runtime's `ToolFault` becomes a failed
`ToolResult`, where the tool's own timeout is folded into the deadline, and
where the spec's output cap is enforced as a backstop.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from tools.checkpoints import WRITES, Checkpointer
from tools.context import ExecutionContext
from tools.errors import InvalidArguments, UnknownTool
from tools.result import Output, ToolFault, ToolResult, decode_text
from tools.runtime import ToolRuntime, checkpoint
from tools.spec import ToolSpec

__all__ = ["ToolCatalog"]


class ToolCatalog:
    """An immutable set of tools, each bound to the runtime that executes it."""

    def __init__(
        self, runtimes: Iterable[ToolRuntime], checkpoints: Checkpointer | None = None
    ) -> None:
        self.checkpoints = checkpoints
        """Snapshots of what writing calls change (None: no checkpoints, as in unit tests)."""
        runtimes = tuple(runtimes)
        entries: dict[str, tuple[ToolSpec, ToolRuntime]] = {}
        for runtime in runtimes:
            for spec in runtime.specs():
                if spec.name in entries:
                    raise ValueError(f"duplicate tool name {spec.name!r}")
                entries[spec.name] = (spec, runtime)
        self._entries: Mapping[str, tuple[ToolSpec, ToolRuntime]] = dict(sorted(entries.items()))
        self.runtimes: tuple[ToolRuntime, ...] = runtimes
        """Every runtime, in the order given (one that declares no tool included)."""

    def names(self) -> list[str]:
        """Tool names, sorted."""
        return list(self._entries)

    def specs(self) -> Sequence[ToolSpec]:
        """Every spec, sorted by name."""
        return tuple(spec for spec, _ in self._entries.values())

    def spec(self, name: str) -> ToolSpec:
        """The spec of ``name``; raises `UnknownTool`."""
        return self._entry(name)[0]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def validate(self, name: str, arguments: bytes | str | Mapping[str, Any]) -> msgspec.Struct:
        """Decode ``arguments`` (JSON text or a mapping) into the tool's argument Struct.

        Empty text counts as ``{}``. Raises `UnknownTool`, or `InvalidArguments`
        whose message carries msgspec's field path and problem. Unknown fields
        are errors.
        """
        spec = self.spec(name)
        try:
            if isinstance(arguments, bytes | str):
                text = arguments.strip() or b"{}"
                args = msgspec.json.decode(text, type=spec.args_type)
            else:
                args = msgspec.convert(arguments, type=spec.args_type)
        except msgspec.ValidationError as exc:
            raise InvalidArguments(name, str(exc)) from None
        except msgspec.DecodeError as exc:
            raise InvalidArguments(name, f"malformed JSON: {exc}") from None
        if spec.validator is not None:
            try:
                spec.validator(msgspec.to_builtins(args))
            except ValueError as exc:
                raise InvalidArguments(name, str(exc)) from None
        return args

    def reads_only(self, name: str, arguments: str) -> bool:
        """Whether the model's call of ``name`` with ``arguments`` (JSON text) is read-only by
        its catalog entry (`ToolSpec.reads_only`); False for an unknown or unavailable tool and
        for arguments that do not validate (such a call is refused on its own)."""
        spec = self._entries.get(name, (None,))[0]
        if spec is None or spec.unavailable is not None or spec.read_only is False:
            return False
        try:
            return spec.reads_only(self.validate(name, arguments))
        except InvalidArguments:
            return False

    def execute(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> ToolResult:
        """Run a validated call to completion, failure, time-out or cancellation.

        Synchronous; meant for the tool actor's own thread, which must not be
        running an asyncio loop (http.fetch runs a private one). Returns a
        `ToolResult` for every runtime outcome; raises only `UnknownTool`, or
        TypeError when ``args`` is not the tool's argument type (a caller bug). The output
        is at most the spec's cap, lowered to ``ctx.output_budget_bytes`` when set.
        """
        spec, runtime = self._entry(name)
        if type(args) is not spec.args_type:
            raise TypeError(
                f"{name}: expected {spec.args_type.__name__}, got {type(args).__name__}; "
                "call validate() first"
            )
        started = time.monotonic()
        bounded = ctx.with_deadline(started + spec.timeout_s)
        cap = bounded.output_cap(spec.output_cap_bytes)
        snap = None
        if self.checkpoints is not None and spec.capabilities & WRITES:
            try:  # no checkpoint, no call: a write that could not be undone is not made
                snap = self.checkpoints.snapshot(ctx.workspace, runtime.touches(name, args))
            except OSError as exc:
                refusal = ToolFault("failed", f"the workspace checkpoint failed: {exc.strerror}")
                return _finish(cap, started, Output(text=""), refusal)
        fault: ToolFault | None = None
        try:
            checkpoint(bounded)
            out = runtime.run(name, args, bounded)
        except ToolFault as exc:
            fault = exc
            out = Output(text=exc.output, truncated=exc.truncated, lossy=exc.lossy)
        result = _finish(cap, started, out, fault)
        if snap is not None and self.checkpoints is not None:
            try:
                changes = self.checkpoints.changes(ctx.workspace, snap)
            except OSError as exc:  # it ran: say so, and that what it changed is not recorded
                lost = ToolFault(
                    "failed", f"the call ran but its workspace checkpoint failed: {exc.strerror}"
                )
                return _finish(cap, started, out, lost)
            if changes is not None:
                result = msgspec.structs.replace(result, workspace=changes)
        return result

    def precheck(self, name: str, args: msgspec.Struct) -> str | None:
        """The runtime's :meth:`ToolRuntime.precheck` for a validated call."""
        return self._entry(name)[1].precheck(name, args)

    def unavailable(self) -> dict[str, str]:
        """Tools that cannot run on this node, with the reason (e.g. no working sandbox)."""
        return {s.name: s.unavailable for s in self.specs() if s.unavailable is not None}

    def close(self) -> None:
        """Close every runtime (:meth:`ToolRuntime.close`)."""
        for runtime in self.runtimes:
            runtime.close()

    def _entry(self, name: str) -> tuple[ToolSpec, ToolRuntime]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownTool(name) from None


def _finish(cap: int, started: float, out: Output, fault: ToolFault | None) -> ToolResult:
    """The result, its output cut to ``cap`` bytes as a backstop (runtimes whose output is
    JSON fit it themselves, so a cut here may leave text that is no longer JSON)."""
    text, truncated, lossy = out.text, out.truncated, out.lossy
    raw = text.encode("utf-8")
    if len(raw) > cap:
        text, _ = decode_text(raw[:cap], truncated=True)
        truncated = True
    return ToolResult(
        ok=fault is None,
        output=text,
        error=None if fault is None else fault.message,
        error_kind=None if fault is None else fault.kind,
        truncated=truncated,
        lossy=lossy,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
