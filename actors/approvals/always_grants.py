"""The ``always`` grants in force: an aggregate of their own, over two kinds of record.

An allow with scope ``always`` (on the invocation's stream, or ``approval/<id>`` when the CLI
decided it on a stopped node) adds the grant of its tool to the run's principal; a
``grant.revoked`` on :data:`GRANTS_STREAM` ends it. The shape is every stream owner's
(``initial`` and a total ``apply`` over :class:`~actors.stream.Recorded`), with one writer of
:data:`GRANTS_STREAM` at a time: the session directory while the node runs
(:class:`~actors.messages.RevokeGrant`), ``reel approvals revoke`` on a data dir no node holds.
Both decide with :func:`revoke` and append before anything else changes. The node's gate folds
every decision and revocation from the journal with :func:`apply`, whoever appended it
(:meth:`~actors.approvals.gate.ToolGate.follow_grants`); :func:`load` folds them offline.
"""

from __future__ import annotations

from collections.abc import Container

import msgspec

from actors.errors import GrantNotActive, InvalidCommand
from actors.stream import Recorded
from events import JournalReadPort
from events.catalog import ApprovalResolved, GrantRevoked, kind_of
from events.fields import PRINCIPAL, TOOL_NAME
from events.redaction.redact import looks_secret

GRANTS_STREAM = "grants"
"""Revocations of ``always`` grants."""
KINDS = (kind_of(ApprovalResolved), kind_of(GrantRevoked))
"""The kinds that make and end an ``always`` grant."""


class AlwaysGrants(msgspec.Struct, frozen=True, kw_only=True):
    """(principal, tool) pairs an allow with scope ``always`` made and no revocation ended
    since."""

    active: frozenset[tuple[str, str]] = frozenset()
    next_seq: int = 0
    """The ``stream_seq`` the next revocation on :data:`GRANTS_STREAM` gets."""


def initial(first: Recorded) -> AlwaysGrants | None:
    """The grants after ``first`` when it is a decision or a revocation; None otherwise."""
    if not isinstance(first.event, (ApprovalResolved, GrantRevoked)):
        return None
    return apply(AlwaysGrants(), first)


def apply(state: AlwaysGrants, rec: Recorded) -> AlwaysGrants:
    """``state`` after ``rec``; total (any other record changes nothing)."""
    event = rec.event
    if isinstance(event, GrantRevoked):
        return AlwaysGrants(
            active=state.active - {(event.principal, event.tool)},
            next_seq=state.next_seq + (rec.stream == GRANTS_STREAM),
        )
    if (
        isinstance(event, ApprovalResolved)
        and event.decision == "allow"
        and event.scope == "always"
        and event.tool
        and event.grant_principal
    ):
        grant = (event.grant_principal, event.tool)
        return msgspec.structs.replace(state, active=state.active | {grant})
    return state


def load(reader: JournalReadPort) -> AlwaysGrants:
    """Every decision and revocation of the journal, folded in order (none: no grants)."""
    state = AlwaysGrants()
    for row in reader.events_of_kinds(KINDS):
        state = apply(state, Recorded.of(row))
    return state


def check_grant(principal: str, tool: str) -> None:
    """Refuse, naming the field, a principal or tool name the journal would refuse (so no
    grant can have it): before a revocation is authorized or decided."""
    for field, value, kind in (("principal", principal, PRINCIPAL), ("tool", tool, TOOL_NAME)):
        problem = kind.problem(value, looks_secret)
        if problem is not None:
            raise InvalidCommand(field, problem)


def revoke(active: Container[tuple[str, str]], principal: str, tool: str) -> GrantRevoked:
    """``grant.revoked`` for the ``always`` grant of ``tool`` to ``principal``;
    :class:`InvalidCommand` for a field :func:`check_grant` refuses, :class:`GrantNotActive`
    when no such grant is in force (nothing to append)."""
    check_grant(principal, tool)
    if (principal, tool) not in active:
        raise GrantNotActive(f"{principal} has no always grant for {tool}")
    return GrantRevoked(principal=principal, tool=tool)
