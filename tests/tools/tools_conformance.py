"""The abstract conformance suite of the tool-runtime seam.

Every runtime must: succeed on a quick call; stop a long call promptly
when the cancel event is set (error_kind ``cancelled``) or the deadline
passes (``timeout``); refuse to start when already cancelled or expired;
and declare specs whose JSON schema is self-contained. Each runtime's test
module subclasses `RuntimeConformance` once. "Promptly" is guarded by the
per-test timeout, not asserted as a duration.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pytest

from tools import CAPABILITIES, ExecutionContext, ToolCatalog, ToolResult

Call = tuple[str, dict[str, Any]]


class RuntimeConformance(ABC):
    @abstractmethod
    def make_catalog(self, workspace: Path) -> ToolCatalog:
        """A catalog holding the runtime under test."""

    @abstractmethod
    def quick_call(self, workspace: Path) -> Call:
        """A call that succeeds quickly."""

    def slow_call(self, workspace: Path) -> Call | None:
        """A call that runs for 30 s or more unless stopped; None if the runtime has none."""
        return None

    def _run(self, workspace: Path, call: Call, ctx: ExecutionContext) -> ToolResult:
        catalog = self.make_catalog(workspace)
        name, arguments = call
        return catalog.execute(name, catalog.validate(name, arguments), ctx)

    def test_quick_call_succeeds(self, workspace: Path) -> None:
        result = self._run(
            workspace, self.quick_call(workspace), ExecutionContext.start(workspace, 30)
        )
        assert result.ok, result.error
        assert result.error_kind is None
        assert result.duration_ms >= 0

    @pytest.mark.timeout(15)
    def test_cancel_stops_a_running_call(self, workspace: Path) -> None:
        call = self.slow_call(workspace)
        if call is None:
            pytest.skip("runtime has no long-running call")
        ctx = ExecutionContext.start(workspace, 60)
        timer = threading.Timer(0.3, ctx.cancel.set)
        timer.start()
        try:
            result = self._run(workspace, call, ctx)
        finally:
            timer.cancel()
        assert not result.ok
        assert result.error_kind == "cancelled", result.error

    @pytest.mark.timeout(15)
    def test_deadline_stops_a_running_call(self, workspace: Path) -> None:
        call = self.slow_call(workspace)
        if call is None:
            pytest.skip("runtime has no long-running call")
        result = self._run(workspace, call, ExecutionContext.start(workspace, 0.3))
        assert not result.ok
        assert result.error_kind == "timeout", result.error

    def test_already_cancelled_does_not_start(self, workspace: Path) -> None:
        ctx = ExecutionContext.start(workspace, 30)
        ctx.cancel.set()
        result = self._run(workspace, self.quick_call(workspace), ctx)
        assert (result.ok, result.error_kind) == (False, "cancelled")

    def test_expired_deadline_does_not_start(self, workspace: Path) -> None:
        ctx = ExecutionContext(workspace=workspace, deadline=time.monotonic() - 1)
        result = self._run(workspace, self.quick_call(workspace), ctx)
        assert (result.ok, result.error_kind) == (False, "timeout")

    def test_specs_are_self_contained(self, workspace: Path) -> None:
        catalog = self.make_catalog(workspace)
        assert len(catalog) > 0
        for spec in catalog.specs():
            assert spec.capabilities <= CAPABILITIES
            assert spec.timeout_s > 0 and spec.output_cap_bytes > 0
            schema = spec.json_schema()
            assert schema["type"] == "object"
            assert schema["additionalProperties"] is False
            assert "$ref" not in repr(schema) and "$defs" not in schema
