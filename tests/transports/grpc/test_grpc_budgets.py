"""A hard budget over gRPC (docs/usage.md): ``RunStream``'s start is refused with
RESOURCE_EXHAUSTED naming the budget, ``budget.refused`` is on the journal, and ``reel chat``
prints the refusal as its error line."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from actors.budgets.config import Budget
from events.catalog import BudgetRefused, kinds_of
from tests.transports.grpc.conftest import GrpcNode, run
from transports.cli.grpc_chat import chat_over_grpc
from transports.config import GrpcConfig, NodeConfig
from transports.grpc import start_grpc
from transports.runtime import open_runtime

NONE_ALLOWED = {
    "no-runs": Budget(scope="principal", subject="admin", measure="runs", period="hour", hard=0)
}


@pytest.fixture
def node(data_dir: Path) -> Iterator[GrpcNode]:
    runtime = open_runtime(
        data_dir, config=NodeConfig(grpc=GrpcConfig(port=0), budgets=NONE_ALLOWED)
    )
    try:
        server = start_grpc(runtime, port=0)
    except BaseException:
        runtime.close(grace_s=0)
        raise
    token = (data_dir / "admin.token").read_text().strip()
    started = GrpcNode(data_dir, runtime, server, token)
    try:
        yield started
    finally:
        started.close()


def test_a_refused_start_is_resource_exhausted(node: GrpcNode) -> None:
    async def start() -> None:
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.start("hello", session_key="budgeted")
                async for _ in stream.events():
                    pass
        finally:
            channel.close()

    with pytest.raises(GRPCError) as caught:
        run(start())
    assert caught.value.status == Status.RESOURCE_EXHAUSTED
    assert "budget no-runs (principal admin: runs per hour)" in (caught.value.message or "")
    (row,) = node.runtime.journal.events_of_kinds(kinds_of(BudgetRefused))
    event = row.decode()
    assert isinstance(event, BudgetRefused)
    assert (row.principal, event.budget, event.used, event.limit) == ("admin", "no-runs", 0, 0)

    out, err = io.StringIO(), io.StringIO()
    code = chat_over_grpc(
        "hello",
        address=node.address,
        data=node.data_dir,
        out=out,
        err=err,
        ask=lambda _prompt: "",
        new=True,
    )
    assert code == 2
    assert "RESOURCE_EXHAUSTED: budget no-runs" in err.getvalue()
