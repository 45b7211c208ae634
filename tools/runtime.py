"""The runtime seam: a few abstract methods every tool runtime implements.

A runtime owns one or more tools. `run` gets already-validated arguments and
an `ExecutionContext` whose deadline already includes the tool's own
timeout. It returns an `Output` or raises `ToolFault`; it must notice
``ctx.cancel`` and the deadline within about 100 ms and clean up (kill
processes, close sockets) before returning.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import msgspec

from tools.context import ExecutionContext
from tools.result import Output, ToolFault
from tools.spec import ToolSpec

__all__ = ["POLL_S", "ToolRuntime", "checkpoint", "wait"]

POLL_S = 0.05
"""How often blocking loops look at the cancel event and the deadline."""


class ToolRuntime(ABC):
    """A family of tools sharing one way of executing."""

    @abstractmethod
    def specs(self) -> Sequence[ToolSpec]:
        """The tools this runtime executes."""

    @abstractmethod
    def run(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> Output:
        """Execute tool ``name``; raise `ToolFault` for any runtime failure."""

    def close(self) -> None:
        """Stop what the runtime keeps running between calls (MCP servers); the node calls it
        when it drains. Nothing by default."""
        return None

    def touches(self, name: str, args: msgspec.Struct) -> tuple[str, ...] | None:
        """The workspace paths a call of a writing tool may change, for its checkpoint; None
        (the default): it cannot say, so the whole workspace tree is compared."""
        return None

    def precheck(self, name: str, args: msgspec.Struct) -> str | None:
        """Why this call would be refused when it runs whatever a human decides (say, argv[0]
        not on the shell allowlist), or None. Asked before an approval is requested, so no
        human is asked about a call that cannot run. Cheap and side-effect free."""
        return None


def checkpoint(ctx: ExecutionContext) -> None:
    """Raise the matching `ToolFault` if the call was cancelled or its deadline passed."""
    if ctx.cancelled():
        raise ToolFault("cancelled", "cancelled by request")
    if ctx.expired():
        raise ToolFault("timeout", "deadline exceeded")


def wait(ctx: ExecutionContext, seconds: float) -> None:
    """Block for ``seconds`` unless cancelled or out of time (then raise `ToolFault`)."""
    checkpoint(ctx)
    budget = min(seconds, max(ctx.remaining(), 0.0))
    if ctx.cancel.wait(budget):
        raise ToolFault("cancelled", "cancelled by request")
    if budget < seconds:
        raise ToolFault("timeout", "deadline exceeded")
