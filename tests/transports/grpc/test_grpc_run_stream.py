"""Gateway.RunStream against a real node over loopback, with the grpclib client."""

from __future__ import annotations

import asyncio

import pytest
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from proto.reel.v1 import (
    CancelCurrentRun,
    Decision,
    ResumeRun,
    RunState,
    RunStreamRequest,
    StartRun,
    TapeEvent,
    ToolOutcome,
)
from tests.transports.grpc.conftest import (
    MAX_MESSAGE,
    SHELL_ECHO,
    TERMINAL,
    GrpcNode,
    converse,
    run,
    tape_seqs,
)


def test_a_run_streams_its_whole_tape_densely_and_ends_with_done(node: GrpcNode) -> None:
    events = run(converse(node, "hello there"))
    assert tape_seqs(events) == list(range(len(events)))
    assert events[0].kind == "run.accepted"
    assert events[0].status is not None and events[0].status.state == RunState.ACCEPTED
    assert events[0].status.session_id
    assert "".join(e.output.text for e in events if e.output is not None) == "hello there"
    last = events[-1]
    assert last.kind == "run.completed"
    assert last.status is not None and last.status.state == RunState.DONE
    assert last.status.reason == "final_answer"
    assert {e.run_id for e in events} == {events[0].run_id}


def test_approval_on_the_stream_lets_the_tool_run(node: GrpcNode) -> None:
    events = run(converse(node, SHELL_ECHO, allow=True))
    kinds = [e.kind for e in events]
    assert "tool.approval_requested" in kinds
    decision = next(e.tool_decision for e in events if e.tool_decision is not None)
    assert decision.outcome == ToolOutcome.APPROVAL_REQUIRED
    assert decision.policy_ids, "the deciding Cedar policy ids travel with the decision"
    proposal = next(e.tool_proposal for e in events if e.tool_proposal is not None)
    assert proposal.tool == "shell.run" and '"echo"' in proposal.arguments_json
    resolution = next(e.approval_resolution for e in events if e.approval_resolution)
    assert resolution.decision == Decision.ALLOW
    result = next(e.tool_result for e in events if e.tool_result is not None)
    assert result.ok and "yo" in result.output
    states = [e.status.state for e in events if e.status is not None]
    assert RunState.AWAITING_APPROVAL in states
    assert states[-1] == RunState.DONE


def test_a_denial_on_the_stream_reaches_the_tool_result(node: GrpcNode) -> None:
    events = run(converse(node, SHELL_ECHO, allow=False))
    resolution = next(e.approval_resolution for e in events if e.approval_resolution)
    assert resolution.decision == Decision.DENY
    result = next(e.tool_result for e in events if e.tool_result is not None)
    assert not result.ok
    assert events[-1].kind in TERMINAL


def test_cancel_on_the_stream_cancels_the_run(node: GrpcNode) -> None:
    async def go() -> list[TapeEvent]:
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.start("/sleep 20000\nslow")
                events = []
                async for event in stream.events():
                    events.append(event)
                    if event.kind == "run.started":
                        await stream.cancel()
                return events
        finally:
            channel.close()

    events = run(go())
    last = events[-1]
    assert last.kind == "run.cancelled"
    assert last.status is not None and last.status.state == RunState.CANCELLED


def test_a_session_key_reuses_the_session_across_runs(node: GrpcNode) -> None:
    first = run(converse(node, "one", session_key="grpc-key-1"))
    second = run(converse(node, "two", session_key="grpc-key-1"))
    session = first[0].status.session_id  # type: ignore[union-attr]
    assert second[0].status.session_id == session  # type: ignore[union-attr]
    third = run(converse(node, "three", session_id=session))
    assert third[0].status.session_id == session  # type: ignore[union-attr]
    assert first[0].run_id != second[0].run_id != third[0].run_id


# --- bad input ------------------------------------------------------------------------------


async def _expect_error(
    node: GrpcNode, *messages: RunStreamRequest, end: bool = False
) -> GRPCError:
    channel = node.channel()
    try:
        async with node.stream(channel) as stream:
            for message in messages:
                await stream.send(message)
            if end:
                await stream.end()
            with pytest.raises(GRPCError) as caught:
                async for _ in stream.events():
                    pass
            return caught.value
    finally:
        channel.close()


def test_the_first_message_must_be_start_or_resume(node: GrpcNode) -> None:
    error = run(_expect_error(node, RunStreamRequest(cancel=CancelCurrentRun())))
    assert error.status == Status.INVALID_ARGUMENT
    assert "first message must be start or resume" in (error.message or "")
    assert "cancel" in (error.message or "")


def test_a_stream_without_messages_is_refused(node: GrpcNode) -> None:
    error = run(_expect_error(node, end=True))
    assert error.status == Status.INVALID_ARGUMENT
    assert "before its first message" in (error.message or "")


def test_a_second_start_on_the_same_stream_is_refused(node: GrpcNode) -> None:
    start = RunStreamRequest(start=StartRun(text="/sleep 20000\nslow", new_session=True))
    error = run(_expect_error(node, start, start))
    assert error.status == Status.INVALID_ARGUMENT
    assert "second start" in (error.message or "")


def test_empty_text_is_refused_naming_the_field(node: GrpcNode) -> None:
    error = run(_expect_error(node, RunStreamRequest(start=StartRun(text="  "))))
    assert error.status == Status.INVALID_ARGUMENT
    assert "start.text" in (error.message or "")


def test_an_unknown_session_is_not_found(node: GrpcNode) -> None:
    start = StartRun(text="hi", session_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
    error = run(_expect_error(node, RunStreamRequest(start=start)))
    assert error.status == Status.NOT_FOUND
    assert "01ARZ3NDEKTSV4RRFFQ69G5FAV" in (error.message or "")


def test_resuming_an_unknown_run_is_not_found(node: GrpcNode) -> None:
    resume = ResumeRun(run_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
    error = run(_expect_error(node, RunStreamRequest(resume=resume)))
    assert error.status == Status.NOT_FOUND
    assert "run '01ARZ3NDEKTSV4RRFFQ69G5FAV' not found" in (error.message or "")


def test_resuming_with_a_malformed_run_id_names_the_field(node: GrpcNode) -> None:
    error = run(_expect_error(node, RunStreamRequest(resume=ResumeRun(run_id="nope"))))
    assert error.status == Status.INVALID_ARGUMENT
    assert "resume.run_id" in (error.message or "")


def test_resuming_past_the_end_of_the_tape_is_out_of_range(node: GrpcNode) -> None:
    events = run(converse(node, "short"))
    resume = ResumeRun(run_id=events[0].run_id, after_seq=len(events) + 5)
    error = run(_expect_error(node, RunStreamRequest(resume=resume)))
    assert error.status == Status.OUT_OF_RANGE
    assert "resume.after_seq" in (error.message or "")


def test_an_oversize_message_is_resource_exhausted(node: GrpcNode) -> None:
    start = RunStreamRequest(start=StartRun(text="x" * (MAX_MESSAGE + 10), new_session=True))
    error = run(_expect_error(node, start))
    assert error.status == Status.RESOURCE_EXHAUSTED
    assert "max message size" in (error.message or "")
    assert str(MAX_MESSAGE) in (error.message or "")


def test_an_approval_for_another_run_is_refused_and_the_stream_goes_on(node: GrpcNode) -> None:
    async def go() -> tuple[list[object], str]:
        channel = node.channel()
        try:
            async with node.stream(channel) as other:
                await other.start(SHELL_ECHO)
                foreign = ""
                async for event in other.events():
                    if event.approval_request is not None:
                        foreign = event.approval_request.approval_id
                        break
            async with node.stream(channel) as stream:
                await stream.start(SHELL_ECHO)
                events: list[object] = []
                refused = False
                async for event in stream.events():
                    events.append(event)
                    if event.approval_request is not None and not refused:
                        await stream.approve(foreign)
                        refused = True
                    elif event.error is not None:
                        ours = next(e for e in events if getattr(e, "approval_request", None))
                        await stream.approve(ours.approval_request.approval_id)  # type: ignore[attr-defined]
            return events, foreign
        finally:
            channel.close()

    events, foreign = run(go())
    errors = [e.error for e in events if e.error is not None]  # type: ignore[attr-defined]
    assert len(errors) == 1
    assert errors[0].code == Status.FAILED_PRECONDITION.value
    assert foreign in errors[0].message and "belongs to run" in errors[0].message
    assert errors[0].field == "approval.approval_id"
    error_entry = next(e for e in events if e.error is not None)  # type: ignore[attr-defined]
    assert error_entry.tape_seq == -1  # type: ignore[attr-defined]
    on_tape = [e for e in events if e.tape_seq >= 0]  # type: ignore[attr-defined]
    assert [e.tape_seq for e in on_tape] == list(range(len(on_tape)))  # type: ignore[attr-defined]
    assert on_tape[-1].kind == "run.completed"  # type: ignore[attr-defined]


def test_an_unknown_approval_on_the_stream_is_an_error_entry(node: GrpcNode) -> None:
    async def go() -> list[object]:
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.start(SHELL_ECHO)
                events: list[object] = []
                async for event in stream.events():
                    events.append(event)
                    if event.approval_request is not None:
                        await stream.approve("01ARZ3NDEKTSV4RRFFQ69G5FAV")
                    elif event.error is not None:
                        await stream.cancel()
                return events
        finally:
            channel.close()

    events = run(go())
    error = next(e.error for e in events if e.error is not None)  # type: ignore[attr-defined]
    assert error.code == Status.NOT_FOUND.value
    assert "01ARZ3NDEKTSV4RRFFQ69G5FAV" in error.message
    assert events[-1].kind == "run.cancelled"  # type: ignore[attr-defined]


def test_a_client_that_disconnects_leaves_the_run_running(node: GrpcNode) -> None:
    async def go() -> tuple[str, list[object]]:
        channel = node.channel()
        async with node.stream(channel) as stream:
            await stream.start("/sleep 300\nstill here after you left")
            async for event in stream.events():
                run_id = event.run_id
                break
        channel.close()  # the TCP connection goes away mid-run
        await asyncio.sleep(0.05)
        channel = node.channel()
        try:
            async with node.stream(channel) as stream:
                await stream.resume(run_id, 0)
                return run_id, [e async for e in stream.events()]
        finally:
            channel.close()

    run_id, events = run(go())
    assert events[0].tape_seq == 1  # type: ignore[attr-defined]
    assert events[-1].kind == "run.completed"  # type: ignore[attr-defined]
    answer = events[-1].status.answer  # type: ignore[attr-defined]
    assert answer == "still here after you left"
    assert node.runtime.views.run(run_id) is not None
