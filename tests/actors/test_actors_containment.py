"""Failures are contained: an actor that raises ends its own work, never the node."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

import msgspec

from actors.provider import ProviderEvent, ProviderRequest, TextDelta, TurnEnd, Usage
from events.catalog import RunCompleted, RunFailed
from tests.actors.conftest import MakeNode
from tools import ExecutionContext, ToolCatalog, ToolResult, ToolsConfig, ToolSpec, build_catalog
from transports.models import DeterministicProvider


class ExplodingCatalog:
    """A real catalog whose ``execute`` raises for ``echo {"text": "explode"}``: a runtime bug
    that escaped the catalog's boundary."""

    def __init__(self, inner: ToolCatalog) -> None:
        self.inner = inner

    def names(self) -> list[str]:
        return self.inner.names()

    def specs(self) -> Sequence[ToolSpec]:
        return self.inner.specs()

    def spec(self, name: str) -> ToolSpec:
        return self.inner.spec(name)

    def validate(self, name: str, arguments: Any) -> msgspec.Struct:
        return self.inner.validate(name, arguments)

    def reads_only(self, name: str, arguments: str) -> bool:
        return self.inner.reads_only(name, arguments)

    def execute(self, name: str, args: msgspec.Struct, ctx: ExecutionContext) -> ToolResult:
        if getattr(args, "text", None) == "explode":
            raise RuntimeError("the runtime blew up")
        return self.inner.execute(name, args, ctx)


def exploding_node(make_node: MakeNode) -> Any:
    catalog = ExplodingCatalog(build_catalog(ToolsConfig()))
    return make_node(catalog=catalog)


def test_a_tool_actor_crash_is_fed_back_and_the_node_keeps_serving(make_node: MakeNode) -> None:
    kit = exploding_node(make_node)
    ticket, end = kit.run('try\n/tool echo {"text": "explode"}\n/tool echo {"text": "fine"}')
    assert isinstance(end, RunCompleted)
    assert end.tool_calls == 2
    lines = end.answer.splitlines()
    assert "failed internally" in lines[1]
    assert lines[2] == 'echo -> {"text":"fine"}'
    _, end2 = kit.run("next", session_id=ticket.session_id)
    assert isinstance(end2, RunCompleted) and end2.answer == "next"
    _, end3 = kit.run('other\n/tool echo {"text": "ok"}')
    assert isinstance(end3, RunCompleted)


def test_a_crashed_tool_invocation_still_records_its_completion(make_node: MakeNode) -> None:
    """The audit trail must not show an invocation that never ended."""
    kit = exploding_node(make_node)
    ticket, _ = kit.run('try\n/tool echo {"text": "explode"}')
    completed = kit.events(ticket.run_id, "tool.completed")
    assert len(completed) == len(kit.events(ticket.run_id, "tool.proposed")) == 1
    assert not completed[0].ok


class BadUsageProvider(DeterministicProvider):
    """Reports usage with a missing token count on messages that say so: a provider bug that
    makes the run actor itself raise while it handles the turn."""

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        if "bad-usage" not in request.messages[-1].content:
            async for item in super().stream(request):
                yield item
            return
        yield TextDelta(text="half ")
        yield Usage(prompt_tokens=None, completion_tokens=1)  # type: ignore[arg-type]
        yield TurnEnd(finish_reason="stop")


def test_a_run_actor_crash_fails_the_run_and_the_session_goes_on(make_node: MakeNode) -> None:
    kit = make_node(provider=BadUsageProvider())
    ticket = kit.start_run("bad-usage please")
    queued = kit.start_run("after the crash", session_id=ticket.session_id)
    end = kit.wait_for_end(ticket.run_id)
    assert isinstance(end, RunFailed)
    assert end.reason == "internal_error"
    assert "TypeError" in end.message
    assert kit.kinds(ticket.run_id)[-1] == "run.failed"
    # the session heard about the end: the queued run starts and completes
    end2 = kit.wait_for_end(queued.run_id)
    assert isinstance(end2, RunCompleted) and end2.answer == "after the crash"
