"""HTTP and gRPC against the edge suite's one table (tests/conformance/edge.py), on one node."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from grpclib.client import Channel
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
    ResumeRun,
    RevokeGrantRequest,
    RouteMessageRequest,
    RunStreamRequest,
    StartRun,
)
from tests.conformance.edge import Case, EdgeConformance, World, field_named, run_async
from tests.transports.http.httpkit import HttpNode, HttpReply
from transports.failures import Kind
from transports.grpc.client import auth_metadata
from transports.grpc.status import STATUS as GRPC_STATUS
from transports.http.failures import STATUS as HTTP_STATUS

CHAT: dict[str, Any] = {"conversation": "dm-alice", "text": "hello", "is_direct": True}
"""What every routed chat message carries besides the case's own fields."""


class TestHttpEdge(EdgeConformance):
    edge = "HTTP"

    OK: dict[str, tuple[int, ...]] = {
        "create_session": (200, 201),  # 200: the key named a session already
        "start_run": (202,),
        "cancel_run": (202,),
    }

    def send(self, world: World, case: Case, args: dict[str, Any]) -> HttpReply:
        token = world.tokens[case.who]
        node = HttpNode(world.runtime, world.http, token or "")
        method, path, body = request(case, args)
        return node.call(method, path, body, auth=None if token is None else f"Bearer {token}")

    def check_ok(self, case: Case, answer: HttpReply) -> None:
        assert answer.status in self.OK.get(case.command, (200,)), answer

    def check_failure(self, case: Case, kind: Kind, answer: HttpReply) -> None:
        status, code = HTTP_STATUS[kind]
        assert (answer.status, answer.error["code"]) == (status, code), answer
        if case.field is not None:
            assert field_named(answer.error["field"]) == case.field, answer.error


def request(case: Case, args: dict[str, Any]) -> tuple[str, str, Any]:
    """The case as an HTTP request: method, path, JSON body."""
    a = args
    match case.command:
        case "create_session":
            return "POST", "/v1/sessions", a
        case "reset_session":
            return "POST", f"/v1/sessions/{a['session_id']}/reset", None
        case "list_sessions":
            return "GET", "/v1/sessions", None
        case "start_run":
            return "POST", f"/v1/sessions/{a['session_id']}/messages", {"text": a["text"]}
        case "get_run":
            return "GET", f"/v1/runs/{a['run_id']}", None
        case "follow_run":
            return "GET", f"/v1/runs/{a['run_id']}/events", None
        case "cancel_run":
            return "POST", f"/v1/runs/{a['run_id']}/cancel", None
        case "list_approvals":
            return "GET", f"/v1/approvals?{urlencode(a)}", None
        case "decide_approval":
            decision = {} if a["decision"] is None else {"decision": a["decision"]}
            return "POST", f"/v1/approvals/{a['approval_id']}", decision
        case "revoke_grant":
            return "POST", "/v1/grants/revoke", a
        case "route_message":
            body = {k: v for k, v in a.items() if k != "channel"} | CHAT
            return "POST", f"/v1/channels/{a['channel']}/messages", body
        case "journal_head":
            return "GET", "/v1/journal/head", None


class TestGrpcEdge(EdgeConformance):
    edge = "gRPC"

    def send(self, world: World, case: Case, args: dict[str, Any]) -> Any:
        token = world.tokens[case.who]
        metadata = None if token is None else auth_metadata(token)

        async def call() -> Any:
            channel = Channel("127.0.0.1", world.grpc.port)
            try:
                return await rpc(channel, case, args, metadata)
            except GRPCError as exc:
                return exc
            finally:
                channel.close()

        return run_async(call())

    def check_ok(self, case: Case, answer: Any) -> None:
        assert not isinstance(answer, GRPCError), answer

    def check_failure(self, case: Case, kind: Kind, answer: Any) -> None:
        assert isinstance(answer, GRPCError), answer
        assert answer.status == GRPC_STATUS[kind], (answer.status, answer.message)
        if case.field is not None:
            named, _, _ = (answer.message or "").partition(":")
            assert field_named(named) == case.field, answer.message


async def rpc(channel: Channel, case: Case, a: dict[str, Any], metadata: Any) -> Any:
    """The case as a gRPC call; its response (a RunStream's: every entry until it ends)."""
    gateway = GatewayStub(channel, metadata=metadata, timeout=30)
    approvals = ApprovalsStub(channel, metadata=metadata, timeout=30)
    match case.command:
        case "create_session":
            return await gateway.resolve_session(ResolveSessionRequest(**a, create=True))
        case "reset_session":
            reset = ResolveSessionRequest(session_id=a["session_id"], reset=True)
            return await gateway.resolve_session(reset)
        case "list_sessions":
            return await gateway.list_sessions(ListSessionsRequest())
        case "start_run":
            start = StartRun(session_id=a["session_id"], text=a["text"])
            return [e async for e in gateway.run_stream([RunStreamRequest(start=start)])]
        case "get_run":
            return await gateway.get_run(GetRunRequest(run_id=a["run_id"]))
        case "follow_run":
            resume = ResumeRun(run_id=a["run_id"])
            return [e async for e in gateway.run_stream([RunStreamRequest(resume=resume)])]
        case "cancel_run":
            return await gateway.cancel_run(CancelRunRequest(run_id=a["run_id"]))
        case "list_approvals":
            return await approvals.list(ListApprovalsRequest(**a))
        case "decide_approval":
            decision = Decision.UNSPECIFIED if a["decision"] is None else Decision.ALLOW
            resolve = ResolveApprovalRequest(approval_id=a["approval_id"], decision=decision)
            return await approvals.resolve(resolve)
        case "revoke_grant":
            return await approvals.revoke_grant(RevokeGrantRequest(**a))
        case "route_message":
            return await gateway.route_message(RouteMessageRequest(**a, **CHAT))
        case "journal_head":
            return await JournalStub(channel, metadata=metadata).head(JournalHeadRequest())
