"""``Approvals.RevokeGrant`` on a running node: an ``always`` grant ends while the node runs
(``grant.revoked`` journaled first), Cedar decides who may, bad input is INVALID_ARGUMENT naming
the field, and a principal without the grant is FAILED_PRECONDITION with nothing recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from actors.approvals.always_grants import GRANTS_STREAM
from proto.reel.v1 import ApprovalScope, ApprovalsStub, RevokeGrantRequest, RevokeGrantResponse
from tests.transports.grpc.conftest import SHELL_ECHO, GrpcNode, run, start_node
from transports.access.tokens import create_token
from transports.grpc.client import auth_metadata


@pytest.fixture
def node(tmp_path: Path) -> Iterator[GrpcNode]:
    started = start_node(tmp_path)
    try:
        yield started
    finally:
        started.close()


async def grant_always(node: GrpcNode) -> bool:
    """A run of the admin's calling shell.run, any approval it asks for allowed ``always`` on
    the stream: True when it asked (once), False when a grant covered the call."""
    channel = node.channel()
    asked = 0
    try:
        async with node.stream(channel) as stream:
            await stream.start(SHELL_ECHO)
            async for event in stream.events():
                if event.approval_request is not None:
                    asked += 1
                    approval_id = event.approval_request.approval_id
                    await stream.approve(approval_id, scope=ApprovalScope.ALWAYS)
    finally:
        channel.close()
    return asked == 1


def revoke(node: GrpcNode, token: str, principal: str, tool: str) -> RevokeGrantResponse:
    async def go() -> RevokeGrantResponse:
        channel = node.channel()
        try:
            stub = ApprovalsStub(channel, metadata=auth_metadata(token), timeout=20)
            return await stub.revoke_grant(RevokeGrantRequest(principal=principal, tool=tool))
        finally:
            channel.close()

    return run(go())


def refused(node: GrpcNode, token: str, principal: str, tool: str) -> GRPCError:
    with pytest.raises(GRPCError) as caught:
        revoke(node, token, principal, tool)
    return caught.value


def token_for(node: GrpcNode, principal: str, role: str) -> str:
    authority = node.runtime.authority
    made, _ = create_token(
        node.runtime.journal, authority.tokens, principal=principal, roles=(role,), created_by="t"
    )
    return made


def test_revoke_an_always_grant_over_grpc(node: GrpcNode) -> None:
    assert run(grant_always(node))
    gate = node.runtime.node.services.gate
    assert gate.has_always("admin", "shell.run")

    viewer = refused(node, token_for(node, "user:vic", "viewer"), "admin", "shell.run")
    assert viewer.status == Status.PERMISSION_DENIED and "grant.revoke" in (viewer.message or "")
    bad = refused(node, node.token, "admin", "Shell Run")
    assert bad.status == Status.INVALID_ARGUMENT and (bad.message or "").startswith("tool: ")
    empty = refused(node, node.token, "", "shell.run")
    assert empty.status == Status.INVALID_ARGUMENT
    assert (empty.message or "").startswith("principal: ")
    no_tool = refused(node, node.token, "admin", "")
    assert no_tool.status == Status.INVALID_ARGUMENT
    assert (no_tool.message or "").startswith("tool: ")
    assert node.runtime.journal.read_stream(GRANTS_STREAM) == []

    operator = token_for(node, "user:olga", "operator")
    done = revoke(node, operator, "admin", "shell.run")
    assert (done.principal, done.tool, done.revoked_by) == ("admin", "shell.run", "user:olga")
    (row,) = node.runtime.journal.read_stream(GRANTS_STREAM)
    assert (row.kind, row.principal) == ("grant.revoked", "user:olga")
    assert not gate.has_always("admin", "shell.run")

    again = refused(node, node.token, "admin", "shell.run")
    assert again.status == Status.FAILED_PRECONDITION
    assert again.message == "admin has no always grant for shell.run"
    assert len(node.runtime.journal.read_stream(GRANTS_STREAM)) == 1
    # the next call asks again
    assert run(grant_always(node))
