"""Who may do what over gRPC, and an operator's forbid on approval.resolve, against a real
node with tokens for each built-in role."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import (
    ApprovalsStub,
    CancelRunRequest,
    Decision,
    GatewayStub,
    GetRunRequest,
    JournalHeadRequest,
    JournalStub,
    ListApprovalsRequest,
    ListSessionsRequest,
    ResolveApprovalRequest,
    ResolveSessionRequest,
)
from tests.transports.grpc.conftest import SHELL_ECHO, GrpcNode, converse, run, start_node
from transports.access.tokens import create_token
from transports.grpc.client import RunStreamClient, auth_metadata

ROLES = ("admin", "operator", "approver", "viewer", "agent")


def token_for(node: GrpcNode, principal: str, *roles: str) -> str:
    authority = node.runtime.authority
    token, _ = create_token(
        node.runtime.journal, authority.tokens, principal=principal, roles=roles, created_by="test"
    )
    return token


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcNode]:
    started = start_node(tmp_path_factory.mktemp("grpc-access"))
    try:
        yield started
    finally:
        started.close()


async def call(node: GrpcNode, token: str, go: Callable[[Any], Awaitable[Any]], stub: Any) -> Any:
    channel = node.channel()
    try:
        return await go(stub(channel, metadata=auth_metadata(token), timeout=20))
    finally:
        channel.close()


def status_of(node: GrpcNode, token: str, go: Callable[[Any], Awaitable[Any]], stub: Any) -> str:
    try:
        run(call(node, token, go, stub))
    except GRPCError as exc:
        return exc.status.name
    return "OK"


def test_roles_by_method_over_grpc(node: GrpcNode) -> None:
    tokens = {role: token_for(node, f"user:{role}", role) for role in ROLES}
    events = run(converse(node, "hello"))  # the admin's session and run
    their_run = events[0].run_id
    theirs = node.runtime.views.run(their_run)
    assert theirs is not None

    def get_run(run_id: str) -> Callable[[Any], Awaitable[Any]]:
        return lambda stub: stub.get_run(GetRunRequest(run_id=run_id))

    cases: list[tuple[str, Callable[[Any], Awaitable[Any]], Any, dict[str, str]]] = [
        (
            "GetRun",
            get_run(their_run),
            GatewayStub,
            {**dict.fromkeys(ROLES, "OK"), "agent": "PERMISSION_DENIED"},
        ),
        (
            "ListSessions",
            lambda s: s.list_sessions(ListSessionsRequest()),
            GatewayStub,
            dict.fromkeys(ROLES, "OK"),
        ),
        (
            "ResolveSession create",
            lambda s: s.resolve_session(ResolveSessionRequest(create=True)),
            GatewayStub,
            {
                "admin": "OK",
                "operator": "OK",
                "approver": "PERMISSION_DENIED",
                "viewer": "PERMISSION_DENIED",
                "agent": "OK",
            },
        ),
        (
            "ResolveSession read",
            lambda s: s.resolve_session(ResolveSessionRequest(session_id=theirs.session_id)),
            GatewayStub,
            {**dict.fromkeys(ROLES, "OK"), "agent": "PERMISSION_DENIED"},
        ),
        (
            "CancelRun",
            lambda s: s.cancel_run(CancelRunRequest(run_id=their_run)),
            GatewayStub,
            {
                "admin": "OK",
                "operator": "OK",
                "approver": "PERMISSION_DENIED",
                "viewer": "PERMISSION_DENIED",
                "agent": "PERMISSION_DENIED",
            },
        ),
        (
            "Approvals.List",
            lambda s: s.list(ListApprovalsRequest()),
            ApprovalsStub,
            dict.fromkeys(ROLES, "OK"),
        ),
        (
            "Journal.Head",
            lambda s: s.head(JournalHeadRequest()),
            JournalStub,
            {**dict.fromkeys(ROLES, "OK"), "agent": "PERMISSION_DENIED"},
        ),
    ]
    failures = []
    for name, go, stub, expected in cases:
        for role, want in expected.items():
            got = status_of(node, tokens[role], go, stub)
            # CancelRun of a finished run: permitted, then refused by the run (not a denial).
            if name == "CancelRun" and want == "OK" and got == "FAILED_PRECONDITION":
                got = "OK"
            if got != want:
                failures.append((name, role, want, got))
    assert not failures, failures
    bad = status_of(node, "reel_nope", get_run(their_run), GatewayStub)
    assert bad == "UNAUTHENTICATED"

    # The agent's own session: it starts a run there and reads it; its principal is recorded.
    agent = tokens["agent"]

    async def own_run() -> str:
        channel = node.channel()
        try:
            async with RunStreamClient(channel, agent, timeout=20) as stream:
                await stream.start("mine")
                run_id = ""
                async for event in stream.events():
                    run_id = event.run_id
                return run_id
        finally:
            channel.close()

    mine = run(own_run())
    assert status_of(node, agent, get_run(mine), GatewayStub) == "OK"
    record = node.runtime.views.run(mine)
    assert record is not None and record.principal == "user:agent"
    listed = run(call(node, agent, lambda s: s.list_sessions(ListSessionsRequest()), GatewayStub))
    seen = {s.session_id for s in listed.sessions}
    assert record.session_id in seen and theirs.session_id not in seen
    owners = {node.runtime.views.session(sid).principal for sid in seen}  # type: ignore[union-attr]
    assert owners == {"user:agent"}


FORBID_OWN_SHELL = """
@id("ops.no-self-approval")
forbid (principal, action == Action::"approval.resolve", resource)
when { context.run_principal == principal && context.tool == "shell.run" };
"""


def test_an_operator_forbid_on_approval_resolve_takes_effect(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "policies").mkdir(parents=True)
    (data_dir / "policies" / "self.cedar").write_text(FORBID_OWN_SHELL)
    node = start_node(data_dir)
    try:
        alice = token_for(node, "user:alice", "operator")
        bob = token_for(node, "user:bob", "approver")

        async def scenario() -> tuple[str, list[str]]:
            channel = node.channel()
            try:
                async with RunStreamClient(channel, alice, timeout=20) as stream:
                    await stream.start(SHELL_ECHO)
                    errors: list[str] = []
                    async for event in stream.events():
                        if event.approval_request is not None:
                            approval_id = event.approval_request.approval_id
                            await stream.approve(approval_id)  # her own run: forbidden
                        elif event.tape_seq < 0 and event.error is not None:
                            errors.append(event.error.message)
                            # Bob approves over Approvals.Resolve: permitted.
                            allow = ResolveApprovalRequest(
                                approval_id=approval_id, decision=Decision.ALLOW
                            )
                            await call(
                                node,
                                bob,
                                partial(ApprovalsStub.resolve, message=allow),
                                ApprovalsStub,
                            )
                    return approval_id, errors
            finally:
                channel.close()

        approval_id, errors = run(scenario())
        assert len(errors) == 1 and "ops.no-self-approval" in errors[0], errors
        record = node.runtime.views.approval(approval_id)
        assert record is not None and record.decided_by == "user:bob"

        # Over the unary method too: the admin's own run, PERMISSION_DENIED naming the policy
        # (a forbid holds against baseline.role.admin).
        async def admin_own() -> str:
            channel = node.channel()
            try:
                async with node.stream(channel) as stream:
                    await stream.start(SHELL_ECHO)
                    async for event in stream.events():
                        if event.approval_request is not None:
                            deny = ResolveApprovalRequest(
                                approval_id=event.approval_request.approval_id,
                                decision=Decision.DENY,
                            )
                            try:
                                await call(
                                    node,
                                    node.token,
                                    partial(ApprovalsStub.resolve, message=deny),
                                    ApprovalsStub,
                                )
                            except GRPCError as exc:
                                await stream.cancel()
                                return f"{exc.status.name} {exc.message}"
                            return "OK"
                    return "no approval"
            finally:
                channel.close()

        outcome = run(admin_own())
        assert outcome.startswith(Status.PERMISSION_DENIED.name), outcome
        assert "approval.resolve" in outcome and "ops.no-self-approval" in outcome
    finally:
        node.close()
