"""Who is asking and whether they may: the one place HTTP and gRPC authenticate a caller and
ask Cedar about an API action.

- :meth:`Authority.authenticate` turns a bearer token into :class:`Credentials` (the data
  dir's ``admin.token`` or a token folded from ``token.*`` events), or ``None``: an unknown,
  malformed, expired or revoked token are refused alike.
- :meth:`Authority.authorize` asks Cedar (:mod:`policies.access`) about one action on one
  resource with that action's context, built here from the views (a session's owner, a run's
  principal, an approval's tool and risk). A state-changing decision, permitted or denied, is
  appended to the journal as ``access.decided`` before the action takes effect.
- Lists are decided once (``*.list``) and then filtered item by item with ``*.read``
  (:meth:`Authority.readable`).

Transports map :class:`PermissionDenied` to 403 / ``PERMISSION_DENIED`` and
:class:`ResourceNotFound` to 404 / ``NOT_FOUND`` at their edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import TypeVar

from events import AppendResult, JournalError, JournalPort, new_id
from events.catalog import AccessDecided
from policies import ACTIONS, AccessRequest, Decision, PolicyEngine
from projections import Views
from projections.records import ApprovalRecord, RunRecord, SessionRecord
from transports.access.tokens import Credentials, TokenBook, use_stream

T = TypeVar("T")

_OWNERS_CACHED = 10_000

Scope = tuple[str, dict[str, str]]
"""(resource id, context) of one request."""


class AccessError(Exception):
    """Base of this module's refusals."""


class PermissionDenied(AccessError):
    """Cedar did not permit the action; the message names it and the deciding policies."""

    def __init__(self, action: str, decision: Decision) -> None:
        ids = ", ".join(decision.policy_ids) or "none: denied by default"
        super().__init__(f"{action} is not permitted ({ids})")
        self.action = action
        self.decision = decision


class ResourceNotFound(AccessError, LookupError):
    """The resource the action is on does not exist (or is not visible yet)."""


class Authority:
    """Authentication and authorization for every transport of one node."""

    def __init__(
        self, engine: PolicyEngine, tokens: TokenBook, views: Views, journal: JournalPort
    ) -> None:
        self.engine = engine
        self.tokens = tokens
        self.views = views
        self.journal = journal
        self._owners: dict[str, str] = {}
        """Session id -> owner: a session's creator never changes, so lists that decide item
        by item read each session's row once."""

    def with_admin_token(self, admin_token: str) -> Authority:
        """This authority accepting ``admin_token`` as the admin's (a server started with a
        token of its own); the same tokens, policies and views."""
        book = self.tokens.sharing(admin_token)
        if book is self.tokens:
            return self
        return Authority(self.engine, book, self.views, self.journal)

    async def permit(self, who: Credentials, action: str, scope: Scope | None = None) -> Decision:
        """:meth:`authorize` from the I/O loop: a state-changing decision is appended to the
        journal (a durable write) on a worker thread; a read is a cached lookup, done here."""
        if ACTIONS[action].changes_state:
            return await asyncio.to_thread(self.authorize, who, action, scope)
        return self.authorize(who, action, scope)

    # --- who --------------------------------------------------------------------------------

    def authenticate(self, token: str | None) -> Credentials | None:
        """Who ``token`` speaks for, or None (the same for every kind of bad token). An API
        token's use is recorded at most hourly (``token.used``, by its principal), submitted and
        never waited for: no request waits on it, and the book's tail folds it once committed."""
        if not token:
            return None
        now_ms = int(time.time() * 1000)
        who = self.tokens.authenticate(token, now_ms)
        if who is not None and (used := self.tokens.use_to_record(who, now_ms)) is not None:
            # Closing: a last use goes unrecorded, and the request goes on.
            book, principal = self.tokens, who.principal

            def fold(done: Future[AppendResult]) -> None:  # the writer's own fold, when durable
                if done.exception() is None:
                    with contextlib.suppress(JournalError):
                        book.written(done.result(), principal)

            with contextlib.suppress(JournalError):
                self.journal.submit(
                    use_stream(used.token_id), [used], expected_seq=None, principal=principal
                ).add_done_callback(fold)
        return who

    # --- may they ---------------------------------------------------------------------------

    def authorize(self, who: Credentials, action: str, scope: Scope | None = None) -> Decision:
        """Permit ``action`` for ``who`` or raise :class:`PermissionDenied`. A state-changing
        action's decision is journaled (``access.decided``) either way."""
        resource_id = scope[0] if scope is not None else "local"
        decision = self._decide(who, action, scope)
        spec = ACTIONS[action]
        if spec.changes_state:
            self.journal.append(
                f"access/{new_id()}",
                [
                    AccessDecided(
                        action=action,
                        resource=f'{spec.resource_type}::"{resource_id}"',
                        outcome="allow" if decision.allowed else "deny",
                        policy_ids=decision.policy_ids,
                        token_id=who.token_id,
                    )
                ],
                expected_seq=0,
                principal=who.principal,
            )
        if not decision.allowed:
            raise PermissionDenied(action, decision)
        return decision

    def may(self, who: Credentials, action: str, scope: Scope | None = None) -> bool:
        """Whether ``who`` may do a read-only ``action`` (nothing journaled, nothing raised):
        what the console uses to hide what a principal may not do."""
        return self._decide(who, action, scope).allowed

    def _decide(self, who: Credentials, action: str, scope: Scope | None) -> Decision:
        resource_id, context = scope if scope is not None else ("local", {})
        return self.engine.authorize(
            AccessRequest(
                principal=who.principal,
                roles=who.roles,
                action=action,
                resource_id=resource_id,
                context=context,
            )
        )

    def readable(
        self, who: Credentials, action: str, items: Iterable[T], scope: Callable[[T], Scope]
    ) -> list[T]:
        """The items ``who`` may read with ``action`` (the list itself was authorized)."""
        return [item for item in items if self.may(who, action, scope(item))]

    # --- scopes: the context of each kind of resource ----------------------------------------

    def owner_of(self, session_id: str) -> str:
        owner = self._owners.get(session_id)
        if owner is None:
            session = self.views.session(session_id)
            if session is None:
                raise ResourceNotFound(f"no session {session_id}")
            owner = session.principal
            if len(self._owners) >= _OWNERS_CACHED:
                self._owners.clear()
            self._owners[session_id] = owner
        return owner

    def session_scope(self, session: SessionRecord | str) -> Scope:
        record = self.views.session(session) if isinstance(session, str) else session
        if record is None:
            raise ResourceNotFound(f"no session {session}")
        return record.session_id, {"session_id": record.session_id, "owner": record.principal}

    def run_scope(self, run: RunRecord | str) -> Scope:
        record = self.views.run(run) if isinstance(run, str) else run
        if record is None:
            raise ResourceNotFound(f"no run {run}")
        return record.run_id, {
            "run_id": record.run_id,
            "session_id": record.session_id,
            "owner": self.owner_of(record.session_id),
            "run_principal": record.principal,
        }

    def approval_scope(
        self,
        approval: ApprovalRecord | str,
        decision: str = "",
        scope: str = "",
        match: str = "",
    ) -> Scope:
        record = self.views.approval(approval) if isinstance(approval, str) else approval
        if record is None:
            raise ResourceNotFound(f"no approval {approval}")
        return record.approval_id, {
            "approval_id": record.approval_id,
            "tool": record.tool,
            "risk": record.risk,
            "run_id": record.run_id,
            "session_id": record.session_id,
            # a pairing approval has no session: the sender asking stands as its owner
            "owner": self.owner_of(record.session_id) if record.session_id else record.principal,
            "run_principal": record.principal,
            "decision": decision,
            "scope": scope,
            "match": match,
        }

    def grant_scope(self, principal: str, tool: str) -> Scope:
        """An ``always`` grant's: the tool it covers (the resource) and whose it is."""
        return tool, {"grant_principal": principal, "tool": tool}

    def memory_scope(
        self, item_id: str, scope: str, owner: str | None, session_id: str | None, writer: str
    ) -> Scope:
        """A memory item's: its ``scope``, and its ``owner`` as a policy reads it: whose item
        (scope ``principal``), the owner of its session (``session``), who wrote it
        (``global``). :class:`ResourceNotFound` when its session is not in the views (yet)."""
        if scope == "session":
            who = self.owner_of(session_id or "")
        elif scope == "principal":
            who = owner or writer
        else:
            who = writer
        return item_id, {
            "item_id": item_id,
            "scope": scope,
            "owner": who,
            "session_id": session_id or "",
        }

    def posture_scope(self, session_id: str, tool: str, posture: str) -> Scope:
        return session_id, {
            "session_id": session_id,
            "owner": self.owner_of(session_id),
            "tool": tool,
            "posture": posture,
        }
