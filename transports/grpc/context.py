"""What every service shares: the runtime, the wake-up hubs, the shutdown signal, paging rules."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from actors import NotFound as ActorsNotFound
from actors.messages import ResolveSession, SessionInfo
from events import is_ulid
from events.fields import SESSION_KEY, Identifier
from events.redaction.redact import looks_secret
from projections import Views
from projections.follow import Signal
from transports.access.authority import AccessError, Authority, Scope
from transports.access.tokens import Credentials
from transports.grpc.authentication import caller
from transports.grpc.status import invalid
from transports.runtime import Runtime

DEFAULT_PAGE = 100
MAX_PAGE = 500
CATCH_UP_S = 2.0


@dataclass
class ServiceContext:
    """Shared by the services of one server; lives on the node's I/O loop."""

    runtime: Runtime
    authority: Authority
    """Authentication and Cedar decisions on API actions."""
    views: Views
    """This server's own read connections to views.db."""
    applied: Signal
    """Notified after each projector batch (views changed)."""
    committed: Signal
    """Notified after each journal commit."""
    shutdown: asyncio.Future[None]
    """Resolved when the server begins to close: open streams end with UNAVAILABLE."""
    streams: set[asyncio.Task[Any]] = field(default_factory=set)
    """Tasks serving long-lived streams (the server waits for them to end when closing)."""

    async def catch_up(self) -> None:
        """Wait (briefly) until the views include everything committed by now, on any node of
        a cluster (:meth:`Runtime.latest_position`): a row a client just learned about (a run
        id from StartRun, through this node or another) is then readable."""
        runtime = self.runtime
        target = await runtime.latest_position(CATCH_UP_S)
        if runtime.projector.position >= target:
            return
        await asyncio.to_thread(runtime.projector.wait_for, target, CATCH_UP_S)

    async def permit(self, action: str, scope: Scope | None = None) -> Credentials:
        """The caller, once Cedar permits ``action`` on ``scope`` for them; else
        PERMISSION_DENIED (or NOT_FOUND for a resource that does not exist)."""
        who = caller()
        await self.authority.permit(who, action, scope)
        return who

    async def scope(self, build: Callable[[], Scope]) -> Scope:
        """``build()`` (a scope of :class:`Authority`): on a miss the views are caught up
        with the journal and it is tried again; NOT_FOUND when the resource does not exist."""
        try:
            return build()
        except AccessError:
            await self.catch_up()
        return build()

    async def find_session(self, session_id: str | None, session_key: str | None) -> str | None:
        """The id of the session named by id or key, or None when there is none (yet)."""
        if session_id is None and session_key is None:
            return None
        probe = ResolveSession(session_id=session_id, session_key=session_key, create=False)
        try:
            info: SessionInfo = await asyncio.wrap_future(self.runtime.node.send(probe))
        except ActorsNotFound:
            return None
        return info.session_id

    def may(self, who: Credentials, action: str, scope: Callable[[], Scope]) -> bool:
        """Whether ``who`` may read one item of a list (an item gone meanwhile: no)."""
        try:
            return self.authority.may(who, action, scope())
        except AccessError:
            return False

    def closing_error(self, what: str) -> GRPCError:
        return GRPCError(Status.UNAVAILABLE, f"server shutting down; {what}")

    @asynccontextmanager
    async def stream(self) -> AsyncIterator[None]:
        """Mark the current task as serving a long-lived stream."""
        task = asyncio.current_task()
        if self.shutdown.done():
            raise self.closing_error("try again after restart")
        if task is not None:
            self.streams.add(task)
        try:
            yield
        finally:
            if task is not None:
                self.streams.discard(task)


def page_size(value: int) -> int:
    """A request's page size: 0 means the default; otherwise 1..MAX_PAGE."""
    if value == 0:
        return DEFAULT_PAGE
    if not 1 <= value <= MAX_PAGE:
        raise invalid("page_size", f"must be between 1 and {MAX_PAGE} (or 0 for {DEFAULT_PAGE})")
    return value


def page_token(value: str) -> str | None:
    """A page token: empty for the first page, else an id from a previous response."""
    if not value:
        return None
    if not is_ulid(value):
        raise invalid("page_token", "not a token this API returned")
    return value


def require_id(field_name: str, value: str) -> str:
    """An id the request must carry, in ULID form."""
    if not value:
        raise invalid(field_name, "required")
    if not is_ulid(value):
        raise invalid(field_name, f"{value[:40]!r} is not a valid id")
    return value


def require_identifier(field_name: str, value: str, kind: Identifier = SESSION_KEY) -> str:
    """A client-chosen identifier (a session key, a channel): the journal stores it in clear
    and refuses one that does not fit its pattern or looks like a secret. Never quoted."""
    problem = kind.problem(value, looks_secret)
    if problem is not None:
        raise invalid(field_name, problem)
    return value
