"""``Gateway.RunStream``: one bidirectional stream follows one run's tape.

Protocol (docs/grpc-api.md):

1. The first client message is ``start`` (a new run) or ``resume`` (an existing run, after a
   ``tape_seq``); anything else ends the stream with INVALID_ARGUMENT.
2. The server sends every tape entry with ``tape_seq`` greater than the client's position, in
   order, read from the tape view, then follows live entries as the projector applies them; the
   stream ends (OK) after the run's terminal status. Because every entry is read by ``tape_seq``
   from the view, a resumed stream gets exactly the entries it missed: none twice, none skipped,
   whether the run is live or long finished.
3. Later client messages: ``approval`` (for this run's approvals only) and ``cancel``. A refused
   command produces an out-of-tape ``error`` entry (``tape_seq`` -1) and the stream goes on; a
   second ``start``/``resume`` ends the stream with INVALID_ARGUMENT.
4. A client that disconnects leaves the run running; a server that shuts down ends open streams
   with UNAVAILABLE, and the client resumes after the restart.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import betterproto2
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from actors.messages import CancelRun, ResolveApproval, StartRun
from events.catalog import GrantMatch as GrantMatchName
from events.catalog import Verdict
from events.fields import CHANNEL
from projections.follow import follow_tape
from proto.reel.v1 import (
    ApprovalDecision,
    Decision,
    GrantMatch,
    ResumeRun,
    RunStreamRequest,
    TapeEvent,
)
from proto.reel.v1 import StartRun as StartMessage
from transports.access.tokens import Credentials
from transports.grpc.context import ServiceContext, require_id, require_identifier
from transports.grpc.status import invalid, not_found, to_grpc_error
from transports.grpc.tape import MATCH_NAMES, SCOPE_NAMES, stream_error, tape_event


def match_name(match: GrantMatch) -> GrantMatchName:
    """The binding a decision asks for; INVALID_ARGUMENT naming ``match`` for an unknown one."""
    if match not in MATCH_NAMES:
        raise invalid("match", "must be ANY, EXACT or PREFIX (unspecified means ANY)")
    return MATCH_NAMES[match]


async def first_message(messages: AsyncIterator[RunStreamRequest]) -> RunStreamRequest:
    """The opening message, or INVALID_ARGUMENT when the client sent none."""
    try:
        return await messages.__anext__()
    except StopAsyncIteration:
        raise GRPCError(
            Status.INVALID_ARGUMENT, "the stream ended before its first message (start or resume)"
        ) from None


class RunConversation:
    """The server side of one RunStream: opens (start/resume), then follows and listens."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.run_id = ""
        self.last_seq = -1
        self._wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._errors: list[TapeEvent] = []
        self._fatal: GRPCError | None = None

    async def serve(self, messages: AsyncIterator[RunStreamRequest]) -> AsyncIterator[TapeEvent]:
        async with self.ctx.stream():
            opening = await first_message(messages)
            kind, body = betterproto2.which_one_of(opening, "kind")
            if kind == "start" and isinstance(body, StartMessage):
                await self._start(body)
            elif kind == "resume" and isinstance(body, ResumeRun):
                await self._resume(body)
            else:
                got = f"got {kind}" if kind else "got an empty message"
                raise GRPCError(
                    Status.INVALID_ARGUMENT,
                    f"the first message must be start or resume ({got})",
                )
            reader = asyncio.create_task(self._listen(messages))
            try:
                async for event in self._follow():
                    yield event
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await reader

    # --- opening -----------------------------------------------------------------------------

    async def _start(self, body: StartMessage) -> None:
        choice, value = betterproto2.which_one_of(body, "session")
        if choice == "session_id":
            require_id("start.session_id", str(value))
        elif choice == "session_key" and not value:
            raise invalid("start.session_key", "must not be empty (use new_session)")
        elif choice == "session_key":
            require_identifier("start.session_key", str(value))
        if body.channel:
            require_identifier("start.channel", body.channel, CHANNEL)
        if not body.text.strip():
            raise invalid("start.text", "must not be empty")
        session_id = value if choice == "session_id" else None
        session_key = value if choice == "session_key" else None
        who = await self._permit_start(session_id, session_key)
        command = StartRun(
            text=body.text,
            session_id=session_id,
            session_key=session_key,
            create=choice != "session_id",
            label=body.label or None,
            principal=who.principal,
            channel=body.channel or "grpc",
        )
        ticket = await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        self.run_id = ticket.run_id

    async def _permit_start(self, session_id: str | None, session_key: str | None) -> Credentials:
        """run.start in an existing session; session.create when the run opens a new one."""
        ctx = self.ctx
        existing = await ctx.find_session(session_id, session_key)
        if existing is None:
            if session_id is not None:
                raise not_found(f"session {session_id!r}")
            return await ctx.permit("session.create")
        return await ctx.permit(
            "run.start", await ctx.scope(lambda: ctx.authority.session_scope(existing))
        )

    async def _resume(self, body: ResumeRun) -> None:
        run_id = require_id("resume.run_id", body.run_id)
        after = -1 if body.after_seq is None else body.after_seq
        if after < -1:
            raise invalid("resume.after_seq", f"must be -1 or more, got {after}")
        views = self.ctx.views
        if views.run(run_id) is None:
            await self.ctx.catch_up()
            if views.run(run_id) is None:
                raise not_found(f"run {run_id!r}")
        ctx = self.ctx
        await ctx.permit("run.read", await ctx.scope(lambda: ctx.authority.run_scope(run_id)))
        if after >= 0 and not views.tape(run_id, after - 1, 1):
            raise GRPCError(
                Status.OUT_OF_RANGE,
                f"resume.after_seq: run {run_id!r} has no tape entry {after} "
                "(resume after a tape_seq this server sent)",
            )
        self.run_id = run_id
        self.last_seq = after

    # --- following the tape ------------------------------------------------------------------

    async def _follow(self) -> AsyncIterator[TapeEvent]:
        ctx = self.ctx
        pages = follow_tape(
            ctx.views,
            self.run_id,
            self.last_seq,
            ctx.applied,
            ctx.views.tape,
            wake=lambda: (self._wake, ctx.shutdown),
        )
        async for entries in pages:
            for entry in entries:
                yield tape_event(entry)
                self.last_seq = entry.tape_seq
            while self._errors:
                yield self._errors.pop(0)
            if self._fatal is not None:
                raise self._fatal
            if self._wake.done():
                self._wake = asyncio.get_running_loop().create_future()
            if ctx.shutdown.done():
                raise ctx.closing_error(
                    f"resume run {self.run_id} with after_seq {self.last_seq} after the restart"
                )

    # --- commands on the stream --------------------------------------------------------------

    def _signal(self) -> None:
        if not self._wake.done():
            self._wake.set_result(None)

    def _refuse(self, exc: BaseException, field: str = "") -> None:
        error = to_grpc_error(exc)
        self._errors.append(
            stream_error(self.run_id, error.status.value, error.message or "", field)
        )
        self._signal()

    async def _listen(self, messages: AsyncIterator[RunStreamRequest]) -> None:
        try:
            async for message in messages:
                kind, body = betterproto2.which_one_of(message, "kind")
                if kind in ("start", "resume"):
                    self._fatal = GRPCError(
                        Status.INVALID_ARGUMENT,
                        f"a second {kind} on the same stream: a stream follows one run "
                        f"(this one follows run {self.run_id}); open a new stream",
                    )
                    self._signal()
                    return
                if kind == "approval" and isinstance(body, ApprovalDecision):
                    await self._approve(body)
                elif kind == "cancel":
                    await self._cancel()
                else:
                    self._refuse(invalid("kind", "empty message: set approval or cancel"), "kind")
        except GRPCError as exc:  # e.g. an oversize message
            self._fatal = exc
            self._signal()

    async def _approve(self, body: ApprovalDecision) -> None:
        field = "approval.approval_id"
        try:
            approval_id = require_id(field, body.approval_id)
            if body.decision not in (Decision.ALLOW, Decision.DENY):
                field = "approval.decision"
                raise invalid(field, "must be ALLOW or DENY")
            if body.scope not in SCOPE_NAMES:
                field = "approval.scope"
                raise invalid(field, "must be ONCE, SESSION or ALWAYS (unspecified means ONCE)")
            views = self.ctx.views
            record = views.approval(approval_id)
            if record is None:
                await self.ctx.catch_up()
                record = views.approval(approval_id)
            if record is None:
                raise not_found(f"approval {approval_id!r}")
            if record.run_id != self.run_id:
                raise GRPCError(
                    Status.FAILED_PRECONDITION,
                    f"approval {approval_id!r} belongs to run {record.run_id}, not to this "
                    f"stream's run {self.run_id}",
                )
            decision: Verdict = "allow" if body.decision == Decision.ALLOW else "deny"
            field = "approval"
            match = match_name(body.match)
            who = await self.ctx.permit(
                "approval.resolve",
                self.ctx.authority.approval_scope(record, decision, SCOPE_NAMES[body.scope], match),
            )
            command = ResolveApproval(
                approval_id=approval_id,
                decision=decision,
                scope=SCOPE_NAMES[body.scope],
                match=match,
                prefix=body.prefix,
                principal=who.principal,
                reason=body.reason,
            )
            await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        except Exception as exc:
            self._refuse(exc, field)

    async def _cancel(self) -> None:
        try:
            ctx = self.ctx
            who = await ctx.permit(
                "run.cancel", await ctx.scope(lambda: ctx.authority.run_scope(self.run_id))
            )
            command = CancelRun(run_id=self.run_id, principal=who.principal)
            await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        except Exception as exc:
            self._refuse(exc, "cancel")
