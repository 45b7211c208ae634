"""Gateway unary calls, Approvals, Journal and authentication, over loopback with grpclib."""

from __future__ import annotations

import asyncio
import hashlib
import struct

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import (
    Approval,
    ApprovalChange,
    ApprovalChangeKind,
    ApprovalScope,
    ApprovalsStub,
    ApprovalState,
    CancelRunRequest,
    Decision,
    Envelope,
    GatewayStub,
    GetRunRequest,
    JournalHeadRequest,
    JournalStub,
    ListApprovalsRequest,
    ListApprovalsResponse,
    ListSessionsRequest,
    ReadJournalRequest,
    ResolveApprovalRequest,
    ResolveSessionRequest,
    RunState,
    TapeEvent,
    VerifyJournalRequest,
    WatchApprovalsRequest,
)
from tests.transports.grpc.conftest import SHELL_ECHO, GrpcNode, converse, run
from tests.transports.grpc.rawcall import h2_call, methods
from tests.transports.records import Records
from transports.grpc.authentication import OPEN_PREFIXES

UNKNOWN = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


async def _call(node: GrpcNode, stub_cls: type, method: str, request: object) -> object:
    channel = node.channel()
    try:
        stub = stub_cls(channel, metadata=node.metadata, timeout=20)
        return await getattr(stub, method)(request)
    finally:
        channel.close()


def call(node: GrpcNode, stub_cls: type, method: str, request: object) -> object:
    return run(_call(node, stub_cls, method, request))


def error_of(node: GrpcNode, stub_cls: type, method: str, request: object) -> GRPCError:
    with pytest.raises(GRPCError) as caught:
        call(node, stub_cls, method, request)
    return caught.value


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "metadata", [None, {"authorization": "Bearer wrong"}, {"authorization": "x"}]
)
def test_calls_without_the_right_token_are_unauthenticated(
    node: GrpcNode, metadata: dict[str, str] | None
) -> None:
    async def go() -> None:
        channel = node.channel()
        try:
            stub = GatewayStub(channel, metadata=metadata)
            await stub.list_sessions(ListSessionsRequest())
        finally:
            channel.close()

    with pytest.raises(GRPCError) as caught:
        run(go())
    assert caught.value.status == Status.UNAUTHENTICATED
    assert node.token not in (caught.value.message or "")


@pytest.mark.parametrize(
    "authorization",
    [b"Bearer \xff\xfe", b"Bearer reel_\x80", "Bearer \u00e9".encode(), b"\xc3( x"],
)
def test_metadata_that_is_not_ascii_is_unauthenticated_on_every_method(
    node: GrpcNode, authorization: bytes
) -> None:
    """HTTP/2 carries header values as bytes; a credential that is not ASCII is no credential
    (UNAUTHENTICATED), never a connection dropped with a traceback."""
    with Records() as log:
        for method in methods():
            status = h2_call(node.server.port, method.path, [(b"authorization", authorization)])
            expected = (
                Status.OK if method.path.startswith(OPEN_PREFIXES) else Status.UNAUTHENTICATED
            )
            assert status == expected.value, method
        other = [(b"authorization", f"Bearer {node.token}".encode()), (b"x-note", b"\xff\xfe")]
        assert h2_call(node.server.port, "/reel.v1.Gateway/ListSessions", other) == 0
    assert not log.faults(), log.text()


def test_run_stream_without_a_token_is_unauthenticated(node: GrpcNode) -> None:
    async def go() -> None:
        channel = node.channel()
        try:
            stub = GatewayStub(channel)
            async for _ in stub.run_stream([]):
                pass
        finally:
            channel.close()

    with pytest.raises(GRPCError) as caught:
        run(go())
    assert caught.value.status == Status.UNAUTHENTICATED


# --- gateway --------------------------------------------------------------------------------


def test_get_run_reports_the_finished_run_and_its_last_tape_seq(node: GrpcNode) -> None:
    events = run(converse(node, "get me"))
    found = call(node, GatewayStub, "get_run", GetRunRequest(run_id=events[0].run_id))
    assert found.run_id == events[0].run_id  # type: ignore[attr-defined]
    assert found.state == RunState.DONE  # type: ignore[attr-defined]
    assert found.termination_reason == "final_answer"  # type: ignore[attr-defined]
    assert found.answer == "get me"  # type: ignore[attr-defined]
    assert found.last_tape_seq == events[-1].tape_seq  # type: ignore[attr-defined]


def test_get_run_of_an_unknown_or_malformed_id(node: GrpcNode) -> None:
    error = error_of(node, GatewayStub, "get_run", GetRunRequest(run_id=UNKNOWN))
    assert error.status == Status.NOT_FOUND and UNKNOWN in (error.message or "")
    error = error_of(node, GatewayStub, "get_run", GetRunRequest(run_id=""))
    assert error.status == Status.INVALID_ARGUMENT and "run_id" in (error.message or "")


def test_cancel_run_cancels_a_live_run_and_refuses_a_finished_one(node: GrpcNode) -> None:
    async def go() -> tuple[list[object], object]:
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.start("/sleep 20000\nlong")
                events: list[object] = []
                async for event in stream.events():
                    events.append(event)
                    if event.kind == "run.started":
                        stub = GatewayStub(channel, metadata=node.metadata)
                        reply = await stub.cancel_run(CancelRunRequest(run_id=event.run_id))
                return events, reply
        finally:
            channel.close()

    events, reply = run(go())
    assert reply.accepted  # type: ignore[attr-defined]
    assert events[-1].kind == "run.cancelled"  # type: ignore[attr-defined]
    again = error_of(
        node,
        GatewayStub,
        "cancel_run",
        CancelRunRequest(run_id=events[0].run_id),  # type: ignore[attr-defined]
    )
    assert again.status == Status.FAILED_PRECONDITION


def test_resolve_session_creates_finds_and_resets(node: GrpcNode) -> None:
    created = call(
        node,
        GatewayStub,
        "resolve_session",
        ResolveSessionRequest(session_key="svc-key", create=True, label="svc"),
    )
    assert created.created and created.session_key == "svc-key"  # type: ignore[attr-defined]
    found = call(node, GatewayStub, "resolve_session", ResolveSessionRequest(session_key="svc-key"))
    assert found.session_id == created.session_id and not found.created  # type: ignore[attr-defined]
    reset = call(
        node,
        GatewayStub,
        "resolve_session",
        ResolveSessionRequest(session_id=created.session_id, reset=True),  # type: ignore[attr-defined]
    )
    assert reset.reset_applied  # type: ignore[attr-defined]
    missing = error_of(
        node, GatewayStub, "resolve_session", ResolveSessionRequest(session_key="no-such-key")
    )
    assert missing.status == Status.NOT_FOUND
    empty = error_of(node, GatewayStub, "resolve_session", ResolveSessionRequest())
    assert empty.status == Status.INVALID_ARGUMENT


def test_list_sessions_pages_through_every_session_once(node: GrpcNode) -> None:
    for n in range(3):
        call(
            node,
            GatewayStub,
            "resolve_session",
            ResolveSessionRequest(session_key=f"page-{n}", create=True),
        )
    node.runtime.projector.wait_for(node.runtime.journal.committed_position, 5)
    seen: list[str] = []
    token = ""
    while True:
        page = call(
            node, GatewayStub, "list_sessions", ListSessionsRequest(page_size=2, page_token=token)
        )
        seen += [s.session_id for s in page.sessions]  # type: ignore[attr-defined]
        assert len(page.sessions) <= 2  # type: ignore[attr-defined]
        token = page.next_page_token  # type: ignore[attr-defined]
        if not token:
            break
    everything = [s.session_id for s in node.runtime.views.sessions(None, 1000)]
    assert seen == everything and len(seen) >= 3
    bad = error_of(node, GatewayStub, "list_sessions", ListSessionsRequest(page_size=501))
    assert bad.status == Status.INVALID_ARGUMENT and "page_size" in (bad.message or "")
    bad = error_of(node, GatewayStub, "list_sessions", ListSessionsRequest(page_token="zz"))
    assert bad.status == Status.INVALID_ARGUMENT and "page_token" in (bad.message or "")


# --- approvals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"run_id": "garbage"}, "run_id"),
        ({"session_id": "01arz"}, "session_id"),
        ({"tool": "Shell.Run"}, "tool"),
    ],
)
def test_approvals_list_refuses_a_malformed_filter_naming_it(
    node: GrpcNode, fields: dict[str, str], field: str
) -> None:
    """As ``GET /v1/approvals`` does: a filter that cannot match anything is a mistake, not an
    empty list."""
    bad = error_of(node, ApprovalsStub, "list", ListApprovalsRequest(**fields))  # type: ignore[arg-type]
    assert bad.status == Status.INVALID_ARGUMENT and field in (bad.message or "")


def test_approvals_list_resolve_and_watch(node: GrpcNode) -> None:
    async def go() -> tuple[
        list[TapeEvent], list[ApprovalChange], ListApprovalsResponse | None, list[Approval]
    ]:
        channel = node.channel()
        approvals = ApprovalsStub(channel, metadata=node.metadata, timeout=20)
        changes: list[ApprovalChange] = []

        async def watch() -> None:
            async for change in approvals.watch(WatchApprovalsRequest()):
                changes.append(change)
                if change.change == ApprovalChangeKind.RESOLVED:
                    return

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.1)
        try:
            async with node.stream(channel) as stream:
                await stream.start(SHELL_ECHO, session_key="approvals-test")
                events: list[TapeEvent] = []
                listed: ListApprovalsResponse | None = None
                async for event in stream.events():
                    events.append(event)
                    if event.approval_request is not None:
                        listed = await approvals.list(
                            ListApprovalsRequest(state=ApprovalState.PENDING, run_id=event.run_id)
                        )
                        await approvals.resolve(
                            ResolveApprovalRequest(
                                approval_id=event.approval_request.approval_id,
                                decision=Decision.ALLOW,
                                scope=ApprovalScope.ONCE,
                                reason="looks fine",
                            )
                        )
            await asyncio.wait_for(watcher, 10)
            resolved = await approvals.list(
                ListApprovalsRequest(state=ApprovalState.RESOLVED, run_id=events[0].run_id)
            )
            return events, changes, listed, list(resolved.approvals)
        finally:
            watcher.cancel()
            channel.close()

    events, changes, listed, resolved = run(go())
    assert listed is not None
    pending = listed.approvals
    assert len(pending) == 1 and pending[0].tool == "shell.run"
    assert pending[0].state == ApprovalState.PENDING
    assert events[-1].kind == "run.completed"
    assert len(resolved) == 1 and resolved[0].decision == Decision.ALLOW
    assert resolved[0].decided_reason == "looks fine"
    kinds = [c.change for c in changes]
    assert kinds == [ApprovalChangeKind.REQUESTED, ApprovalChangeKind.RESOLVED]
    assert changes[0].approval is not None
    assert changes[0].approval.approval_id == pending[0].approval_id
    assert changes[1].position > changes[0].position


def test_resolving_an_unknown_or_undecided_approval_is_refused(node: GrpcNode) -> None:
    unknown = error_of(
        node,
        ApprovalsStub,
        "resolve",
        ResolveApprovalRequest(approval_id=UNKNOWN, decision=Decision.ALLOW),
    )
    assert unknown.status == Status.NOT_FOUND
    undecided = error_of(
        node, ApprovalsStub, "resolve", ResolveApprovalRequest(approval_id=UNKNOWN)
    )
    assert undecided.status == Status.INVALID_ARGUMENT and "decision" in (undecided.message or "")


# --- journal --------------------------------------------------------------------------------


def _identity(e: Envelope) -> bytes:
    """The hashed envelope fields, encoded as docs/journal-format.md says (independently)."""

    def text(value: str) -> bytes:
        data = value.encode()
        return struct.pack(">I", len(data)) + data

    def optional(value: str | None) -> bytes:
        return b"\xff\xff\xff\xff" if value is None else text(value)

    return b"".join(
        (
            struct.pack(">q", e.position),
            text(e.event_id),
            text(e.stream),
            struct.pack(">q", e.stream_seq),
            text(e.kind),
            struct.pack(">q", e.version),
            struct.pack(">q", e.recorded_at_ms),
            text(e.principal),
            optional(e.correlation_id),
            optional(e.causation_id),
        )
    )


def test_a_remote_auditor_can_recompute_the_chain_from_read(node: GrpcNode) -> None:
    run(converse(node, "audit me"))

    async def go() -> tuple[object, list[Envelope], object]:
        channel = node.channel()
        try:
            stub = JournalStub(channel, metadata=node.metadata, timeout=20)
            head = await stub.head(JournalHeadRequest())
            rows = [e async for e in stub.read(ReadJournalRequest(after_position=0))]
            report = await stub.verify(VerifyJournalRequest())
            return head, rows, report
        finally:
            channel.close()

    head, rows, report = run(go())
    assert [r.position for r in rows][: head.position] == list(range(1, head.position + 1))  # type: ignore[attr-defined]
    previous = bytes(32)
    for row in rows:
        assert row.prev_hash == previous
        digest = hashlib.sha256(row.prev_hash + _identity(row) + row.payload).digest()
        assert digest == row.hash, f"row {row.position} does not hash to its hash"
        previous = row.hash
    by_position = {r.position: r for r in rows}
    assert by_position[head.position].hash == head.hash  # type: ignore[attr-defined]
    assert any(r.correlation_id is None for r in rows)  # absent stays absent
    assert report.ok and report.fault is None  # type: ignore[attr-defined]
    assert report.head_position >= head.position  # type: ignore[attr-defined]


def test_read_with_a_limit_and_follow(node: GrpcNode) -> None:
    async def go() -> tuple[list[Envelope], list[Envelope]]:
        channel = node.channel()
        try:
            stub = JournalStub(channel, metadata=node.metadata, timeout=20)
            limited = [e async for e in stub.read(ReadJournalRequest(after_position=1, limit=3))]
            head = (await stub.head(JournalHeadRequest())).position
            followed: list[Envelope] = []

            async def follow() -> None:
                async for e in stub.read(ReadJournalRequest(after_position=head, follow=True)):
                    followed.append(e)
                    if e.kind == "run.completed":
                        return

            task = asyncio.create_task(follow())
            await asyncio.sleep(0.05)
            await converse(node, "followed")
            await asyncio.wait_for(task, 10)
            return limited, followed
        finally:
            channel.close()

    limited, followed = run(go())
    assert [e.position for e in limited] == [2, 3, 4]
    # background work (a reflection task for an earlier run) may commit first: not the point
    ours = [e.kind for e in followed if not e.kind.startswith(("task.", "learning."))]
    assert ours[0] in ("access.decided", "session.created", "run.accepted")
    assert [e.position for e in followed] == list(
        range(followed[0].position, followed[0].position + len(followed))
    )

    async def read_bad() -> None:
        channel = node.channel()
        try:
            stub = JournalStub(channel, metadata=node.metadata, timeout=20)
            async for _ in stub.read(ReadJournalRequest(after_position=-1)):
                pass
        finally:
            channel.close()

    with pytest.raises(GRPCError) as caught:
        run(read_bad())
    assert caught.value.status == Status.INVALID_ARGUMENT
    assert "after_position" in (caught.value.message or "")
