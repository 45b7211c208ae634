"""Approval grants: what a human's ``allow`` covers after the call it answered.

Scopes: ``once`` (this call), ``session`` (later calls in the session until it resets) and
``always`` (the tool for the run's principal, with any arguments, until revoked). A
``session`` grant can be bound (``match``) to exactly the approved arguments (``exact``) or to
a prefix of the call's subject (``prefix``: argv, path, or method and URL; see
:mod:`tools.subjects`); ``any`` allows the tool with any arguments.

One home for three things every surface needs: checking a decision before it is recorded
(:func:`check_decision`), deciding whether a later call is covered (:func:`covers`), and the
sentence that tells the human what a choice grants (:func:`describe`, :func:`options`).

The ``always`` grants in force are an aggregate of their own: :mod:`actors.approvals.always_grants`.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from actors.errors import InvalidCommand
from events.catalog import GRANT_MATCHES, ApprovalResolved, GrantMatch, SessionGrantAdded
from projections.records import GrantOption
from tools.subjects import arguments_digest, covered, parse_prefix, prefix_kind


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
    if match not in GRANT_MATCHES:
        raise InvalidCommand("match", f"must be one of {', '.join(GRANT_MATCHES)}")
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
