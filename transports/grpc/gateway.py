"""``reel.v1.Gateway``: RunStream (see :mod:`transports.grpc.run_stream`), GetRun, CancelRun,
ListSessions, ResolveSession and RouteMessage (a chat message into a channel's router)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import betterproto2

from actors.messages import CancelRun, ResolveSession, SessionInfo
from proto.reel.v1 import (
    CancelRunRequest,
    CancelRunResponse,
    GatewayBase,
    GetRunRequest,
    ListSessionsRequest,
    ListSessionsResponse,
    ResolveSessionRequest,
    ResolveSessionResponse,
    RouteMessageRequest,
    RouteMessageResponse,
    Run,
    RunStreamRequest,
    TapeEvent,
)
from transports.access.tokens import Credentials
from transports.channels import Attachment, InboundMessage, UnknownChannel, configured
from transports.grpc.context import (
    ServiceContext,
    page_size,
    page_token,
    require_id,
    require_identifier,
)
from transports.grpc.records import run_message, session_message
from transports.grpc.run_stream import RunConversation
from transports.grpc.status import invalid, not_found


class GatewayService(GatewayBase):
    """Runs and sessions over the node's commands and views."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def run_stream(
        self, messages: AsyncIterator[RunStreamRequest]
    ) -> AsyncIterator[TapeEvent]:
        async for event in RunConversation(self.ctx).serve(messages):
            yield event

    async def get_run(self, message: GetRunRequest) -> Run:
        run_id = require_id("run_id", message.run_id)
        ctx = self.ctx
        views = ctx.views
        run = views.run(run_id)
        if run is None:
            await ctx.catch_up()
            run = views.run(run_id)
        if run is None:
            raise not_found(f"run {run_id!r}")
        await ctx.permit("run.read", await ctx.scope(lambda: ctx.authority.run_scope(run)))
        return run_message(run, views.last_tape_seq(run_id))

    async def cancel_run(self, message: CancelRunRequest) -> CancelRunResponse:
        run_id = require_id("run_id", message.run_id)
        ctx = self.ctx
        who = await ctx.permit(
            "run.cancel", await ctx.scope(lambda: ctx.authority.run_scope(run_id))
        )
        command = CancelRun(run_id=run_id, principal=who.principal)
        accepted = await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        return CancelRunResponse(run_id=run_id, accepted=bool(accepted))

    async def list_sessions(self, message: ListSessionsRequest) -> ListSessionsResponse:
        size = page_size(message.page_size)
        after = page_token(message.page_token)
        ctx = self.ctx
        who = await ctx.permit("session.list")
        rows = ctx.views.sessions(after, size + 1)
        more = len(rows) > size
        rows = rows[:size]
        # Filtered after paging: a page may hold fewer than page_size sessions (or none) and
        # still have a next page.
        readable = ctx.authority.readable(who, "session.read", rows, ctx.authority.session_scope)
        return ListSessionsResponse(
            sessions=[session_message(s) for s in readable],
            next_page_token=rows[-1].session_id if more and rows else "",
        )

    async def resolve_session(self, message: ResolveSessionRequest) -> ResolveSessionResponse:
        choice, value = betterproto2.which_one_of(message, "session")
        if choice == "session_id":
            require_id("session_id", str(value))
        elif choice == "session_key" and not value:
            raise invalid("session_key", "must not be empty")
        elif choice == "session_key":
            require_identifier("session_key", str(value))
        elif not choice and not message.create:
            raise invalid("session", "give session_id or session_key, or set create")
        session_id = value if choice == "session_id" else None
        session_key = value if choice == "session_key" else None
        who = await self._permit_session(session_id, session_key, message.create, message.reset)
        command = ResolveSession(
            session_id=session_id,
            session_key=session_key,
            label=message.label or None,
            create=message.create,
            reset=message.reset,
            principal=who.principal,
        )
        info: SessionInfo = await asyncio.wrap_future(self.ctx.runtime.node.send(command))
        return ResolveSessionResponse(
            session_id=info.session_id,
            session_key=info.session_key or "",
            label=info.label or "",
            parent_session_id=info.parent_session_id or "",
            created=info.created,
            reset_applied=info.reset_applied,
        )

    async def _permit_session(
        self, session_id: str | None, session_key: str | None, create: bool, reset: bool
    ) -> Credentials:
        """session.create for a session that does not exist yet, else session.read of the one
        found (and session.reset when asked)."""
        ctx = self.ctx
        existing = await ctx.find_session(session_id, session_key)
        if existing is None:
            if create:
                return await ctx.permit("session.create")
            raise not_found(f"session {session_id or session_key!r}")
        scope = await ctx.scope(lambda: ctx.authority.session_scope(existing))
        who = await ctx.permit("session.read", scope)
        if reset:
            await ctx.permit("session.reset", scope)
        return who

    async def route_message(self, message: RouteMessageRequest) -> RouteMessageResponse:
        """The router's decision on one message (docs/channels.md); ``channel.route``."""
        try:
            hub = configured(self.ctx.runtime.channels, message.channel)
        except UnknownChannel as exc:
            raise not_found(f"channel {message.channel[:40]!r}") from exc
        await self.ctx.permit("channel.route", (message.channel, {}))
        inbound = InboundMessage(
            channel=message.channel,
            conversation=message.conversation,
            sender=message.sender,
            text=message.text,
            message_id=message.message_id,
            thread=message.thread or None,
            sender_name=message.sender_name,
            is_direct=message.is_direct,
            mentions_agent=message.mentions_agent,
            attachments=tuple(
                Attachment(name=a.name, content_type=a.content_type, url=a.url, size=a.size)
                for a in message.attachments
            ),
        )
        result = await hub.route(inbound)
        return RouteMessageResponse(
            accepted=result.accepted,
            reason=result.reason,
            detail=result.detail,
            route=result.route or "",
            principal=result.principal,
            session_key=result.session_key or "",
            session_id=result.session_id or "",
            run_id=result.run_id or "",
            queued=result.queued,
            duplicate=result.duplicate,
            reply=result.reply,
        )
