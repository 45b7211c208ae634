"""Approval grants: what a human's ``allow`` covers after the call it answered.

Scopes: ``once`` (this call), ``session`` (later calls in the session until it resets) and
``always`` (the tool for the run's principal, with any arguments, until revoked). A
``session`` grant can be bound (``match``) to exactly the approved arguments (``exact``) or to
a prefix of the call's subject (``prefix``: argv, path, or method and URL; see
:mod:`tools.subjects`); ``any`` allows the tool with any arguments.

One home for three things every surface needs: checking a decision before it is recorded
(:func:`check_decision`), deciding whether a later call is covered (:func:`covers`), and the
sentence that tells the human what a choice grants (:func:`describe`, :func:`options`).

The ``always`` grants in force are an aggregate of their own (:class:`AlwaysGrants`): an allow
with scope ``always`` (on the invocation's stream, or ``approval/<id>``) adds one, a
``grant.revoked`` on :data:`GRANTS_STREAM` ends it. :func:`apply_always` folds them (recovery
reloads the gate with it, ``reel approvals revoke`` on a stopped node reads them with it) and
:func:`revoke` decides a revocation, for the session directory and the offline CLI alike.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

import msgspec

from actors.errors import GrantNotActive, InvalidCommand
from actors.stream import Recorded
from events import JournalReadPort
from events.catalog import ApprovalResolved, GrantMatch, GrantRevoked, SessionGrantAdded, kind_of
from events.fields import PRINCIPAL, TOOL_NAME
from events.redact import looks_secret
from projections.records import GrantOption
from tools.subjects import arguments_digest, covered, parse_prefix, prefix_kind

MATCHES: tuple[GrantMatch, ...] = ("any", "exact", "prefix")


class Grant(msgspec.Struct, frozen=True, kw_only=True):
    """A ``session`` grant as the session keeps it."""

    tool: str
    match: GrantMatch = "any"
    prefix: str = ""
    digest: bytes = b""
    approval_id: str = ""
    decided_by: str = ""
    """Who allowed it (from the decision; the session's record names them as its principal)."""

    @property
    def key(self) -> tuple[str, str, str, bytes]:
        """What makes two grants the same (the approval that made it does not)."""
        return (self.tool, self.match, self.prefix, self.digest)


def grant_of(event: ApprovalResolved | SessionGrantAdded) -> Grant:
    """The grant an allow with scope ``session`` made (the decision, or the session's record
    of it: both carry the same fields)."""
    return Grant(
        tool=event.tool,
        match=event.match,
        prefix=event.prefix,
        digest=event.arguments_digest,
        approval_id=event.approval_id,
        decided_by=event.decided_by if isinstance(event, ApprovalResolved) else "",
    )


def check_decision(
    args_type: type[msgspec.Struct] | None, decision: str, scope: str, match: str, prefix: str
) -> None:
    """Refuse a decision whose binding makes no sense, naming the field: ``match`` other than
    ``any`` outside an allow with scope ``session``; ``prefix`` without ``match=prefix``; a
    prefix the tool cannot bind (no subject, unparsable)."""
    if match not in MATCHES:
        raise InvalidCommand("match", f"must be one of {', '.join(MATCHES)}")
    if match != "any" and (decision != "allow" or scope != "session"):
        raise InvalidCommand("match", "binds only an allow with scope session")
    if match != "prefix":
        if prefix:
            raise InvalidCommand("prefix", "is only used with match=prefix")
        return
    if args_type is None:
        raise InvalidCommand("prefix", "the tool is not known to this node")
    try:
        parse_prefix(args_type, prefix)
    except ValueError as exc:
        raise InvalidCommand("prefix", str(exc)) from None


def covers(grant: Grant, tool: str, args: msgspec.Struct) -> bool:
    """Whether ``grant`` allows this call of ``tool`` with these validated arguments.
    Fails closed: a prefix that no longer parses covers nothing."""
    if grant.tool != tool:
        return False
    if grant.match == "any":
        return True
    if grant.match == "exact":
        return bool(grant.digest) and grant.digest == arguments_digest(args)
    try:
        return covered(args, parse_prefix(type(args), grant.prefix))
    except ValueError:
        return False


def describe(tool: str, scope: str, match: str = "any", prefix: str = "", who: str = "") -> str:
    """What an ``allow`` with this scope and binding grants, as one sentence."""
    if scope == "once":
        return f"this {tool} call only"
    if scope == "always":
        owner = f" for {who}" if who else ""
        return f"{tool} with any arguments{owner} in every session, until revoked"
    if match == "exact":
        bound = "these exact arguments"
    elif match == "prefix":
        bound = f"arguments starting with {prefix!r}"
    else:
        bound = "any arguments"
    return f"{tool} with {bound} in this session, until it resets"


def options(
    tool: str, args_type: type[msgspec.Struct] | None, scopes: Sequence[str], who: str
) -> tuple[GrantOption, ...]:
    """The choices a pending approval offers, in the order a prompt lists them."""
    out: list[GrantOption] = []
    for scope in scopes:
        if scope != "session":
            out.append(GrantOption(scope=scope, match="any", covers=describe(tool, scope, who=who)))
            continue
        out.append(GrantOption(scope=scope, match="exact", covers=describe(tool, scope, "exact")))
        kind = prefix_kind(args_type) if args_type is not None else None
        if kind is not None:
            out.append(
                GrantOption(
                    scope=scope,
                    match="prefix",
                    covers=f"{tool} with arguments whose {kind} starts with a prefix you type, "
                    "in this session, until it resets",
                )
            )
        out.append(GrantOption(scope=scope, match="any", covers=describe(tool, scope, "any")))
    return tuple(out)


# --- always grants -----------------------------------------------------------------------------

GRANTS_STREAM = "grants"
"""Revocations of ``always`` grants: the session directory writes it, or ``reel approvals
revoke`` on a data dir no node holds."""
ALWAYS_KINDS = (kind_of(ApprovalResolved), kind_of(GrantRevoked))
"""The events that make and end an ``always`` grant."""


class AlwaysGrants(msgspec.Struct, frozen=True, kw_only=True):
    """The ``always`` grants in force: (principal, tool) pairs an allow with scope ``always``
    made and no revocation ended since."""

    active: frozenset[tuple[str, str]] = frozenset()
    next_seq: int = 0
    """The ``stream_seq`` the next revocation on :data:`GRANTS_STREAM` gets."""


def apply_always(state: AlwaysGrants, rec: Recorded) -> AlwaysGrants:
    """Fold one event (any other than a decision or a revocation changes nothing)."""
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


def always_grants(reader: JournalReadPort) -> AlwaysGrants:
    """Every decision and revocation of the journal, folded in order."""
    state = AlwaysGrants()
    for row in reader.events_of_kinds(ALWAYS_KINDS):
        state = apply_always(state, Recorded.of(row))
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
