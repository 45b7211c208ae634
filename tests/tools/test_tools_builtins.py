from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import msgspec
import pytest

from tests.tools.tools_conformance import Call, RuntimeConformance
from tools import ExecutionContext, ToolCatalog, ToolsConfig
from tools.builtins import BuiltinRuntime


def _catalog(**config: object) -> ToolCatalog:
    return ToolCatalog([BuiltinRuntime(ToolsConfig(**config))])  # type: ignore[arg-type]


class TestBuiltinConformance(RuntimeConformance):
    def make_catalog(self, workspace: Path) -> ToolCatalog:
        return _catalog()

    def quick_call(self, workspace: Path) -> Call:
        return ("echo", {"text": "hi"})

    def slow_call(self, workspace: Path) -> Call:
        return ("sleep", {"seconds": 30})


def test_echo_returns_the_text(workspace: Path) -> None:
    catalog = _catalog()
    result = catalog.execute(
        "echo", catalog.validate("echo", '{"text": "héllo"}'), ExecutionContext.start(workspace, 5)
    )
    assert result.ok
    assert msgspec.json.decode(result.output) == {"text": "héllo"}


def test_time_now_gives_iso_utc_and_epoch_ms(workspace: Path) -> None:
    catalog = _catalog()
    result = catalog.execute(
        "time.now", catalog.validate("time.now", ""), ExecutionContext.start(workspace, 5)
    )
    body = msgspec.json.decode(result.output)
    assert body["iso"].endswith("Z")
    parsed = datetime.fromisoformat(body["iso"].replace("Z", "+00:00"))
    assert round(parsed.timestamp() * 1000) == body["epoch_ms"]


def test_sleep_over_the_cap_is_refused(workspace: Path) -> None:
    catalog = _catalog(sleep_cap_s=1.0)
    result = catalog.execute(
        "sleep", catalog.validate("sleep", {"seconds": 2}), ExecutionContext.start(workspace, 5)
    )
    assert (result.ok, result.error_kind) == (False, "limit")
    assert "seconds" in (result.error or "")


def test_negative_sleep_is_invalid() -> None:
    from tools import InvalidArguments

    with pytest.raises(InvalidArguments, match=r"\$\.seconds"):
        _catalog().validate("sleep", {"seconds": -1})


@pytest.mark.timeout(10)
def test_sleep_cancel_from_another_thread(workspace: Path) -> None:
    catalog = _catalog()
    ctx = ExecutionContext.start(workspace, 60)
    threading.Timer(0.2, ctx.cancel.set).start()
    result = catalog.execute("sleep", catalog.validate("sleep", {"seconds": 29}), ctx)
    assert result.error_kind == "cancelled"
    assert result.error == "cancelled by request"
