"""`ExecutionContext`: the per-call facts a runtime needs besides the arguments."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tools.handles import Secrets

__all__ = ["ExecutionContext"]


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """Where a call runs, until when, and how to stop it.

    Not a msgspec value: it carries a live `threading.Event`. Limits and
    allowlists are not here; they are bound into the runtimes from
    `ToolsConfig` when the catalog is built, so a spec's declared limits and
    the enforced ones come from the same place.
    """

    workspace: Path
    """The directory file, shell and WASM tools are confined to (must exist)."""
    deadline: float
    """Absolute `time.monotonic()` instant after which the call is a timeout."""
    cancel: threading.Event = field(default_factory=threading.Event)
    """Set by the owner to stop the call; runtimes notice within ~100 ms."""
    output_budget_bytes: int | None = None
    """The most UTF-8 bytes the result's output may take so that the caller can record it
    (the tool actor derives it from the journal's payload limit); None: only the tool's own
    cap. Runtimes whose output is JSON cut their text fields to fit and mark the cut."""
    principal: str | None = None
    """Who the call acts for: the run's principal. A tool that records a fact of its own (the
    memory tools) records it as this principal and reads what this principal may see."""
    session_id: str | None = None
    """The session the call belongs to (the memory tools' scope ``session``)."""
    invocation_id: str | None = None
    """The tool invocation (``tool/<id>``): what a fact the tool records was caused by."""
    secrets: Secrets | None = None
    """The node's vault, for the runtime to resolve the call's handles (tools/handles.py) at
    execution and nowhere else; None: no vault (a handle is then a tool error)."""

    @classmethod
    def start(
        cls,
        workspace: Path | str,
        timeout_s: float,
        cancel: threading.Event | None = None,
        *,
        output_budget_bytes: int | None = None,
        principal: str | None = None,
        session_id: str | None = None,
        invocation_id: str | None = None,
        secrets: Secrets | None = None,
    ) -> ExecutionContext:
        """A context whose deadline is ``timeout_s`` from now."""
        return cls(
            workspace=Path(workspace),
            deadline=time.monotonic() + timeout_s,
            cancel=cancel if cancel is not None else threading.Event(),
            output_budget_bytes=output_budget_bytes,
            principal=principal,
            session_id=session_id,
            invocation_id=invocation_id,
            secrets=secrets,
        )

    def output_cap(self, spec_cap: int) -> int:
        """The effective cap on the output: the tool's own, lowered to the caller's budget."""
        if self.output_budget_bytes is None:
            return spec_cap
        return max(0, min(spec_cap, self.output_budget_bytes))

    def remaining(self) -> float:
        """Seconds left before the deadline (negative when passed)."""
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def with_deadline(self, deadline: float) -> ExecutionContext:
        """A copy whose deadline is the earlier of the current one and ``deadline``."""
        return replace(self, deadline=min(self.deadline, deadline))
