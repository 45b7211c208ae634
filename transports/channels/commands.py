"""``!reel`` channel commands: parsing (pure) and the Cedar request each one is.

- ``!reel status``: the conversation's session and its last run (``channel.command``,
  ``command = "status"``);
- ``!reel stop``: cancel the session's run in progress (``channel.command``, ``"stop"``);
- ``!reel reset``: later runs forget earlier history (``channel.command``, ``"reset"``);
- ``!reel approve ID [once|session|always]`` / ``!reel deny ID [reason]``: decide a pending
  approval (``approval.resolve``);
- ``!reel help`` (or ``!reel``): the list (no decision).

Each is decided by Cedar for the sender's principal (``channel:<channel>:<sender>``).
A sender holds no token roles, so ``approval.resolve`` is permitted only where an operator
policy names the sender (or a role a token gives that principal); ``decided_by`` is the sender.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

import msgspec

from actors import Node
from actors.channels.message import InboundMessage
from actors.channels.router import Command
from actors.errors import ActorsError, UnknownSession
from actors.messages import CancelRun, ResetSession, ResolveApproval, ResolveSession, SessionInfo
from events import is_ulid
from events.catalog import GRANT_SCOPES, ChannelCommandName, CommandOutcome, GrantScope, Verdict
from events.lifecycle import TERMINAL_STATUSES
from projections import Views
from transports.access.authority import AccessError, Authority, PermissionDenied
from transports.access.tokens import Credentials
from transports.failures import ALL_KINDS, Kind, kind_of

R = TypeVar("R")


class CommandHub(Protocol):
    """What a command needs of the hub that runs it (:class:`transports.channels.hub.ChannelHub`
    is one): the node, who may, and the views read fresh."""

    @property
    def node(self) -> Node: ...

    @property
    def authority(self) -> Authority: ...

    @property
    def views(self) -> Views: ...

    async def fresh(self, read: Callable[[], R | None]) -> R | None: ...


CommandName = ChannelCommandName

OUTCOME: Final[dict[Kind, CommandOutcome]] = {
    **dict.fromkeys(ALL_KINDS, "failed"),
    "permission_denied": "denied",
}
"""Each kind of failure (:mod:`transports.failures`) as the outcome a command records."""

HELP: Final = (
    "Commands: `!reel status`, `!reel stop`, `!reel reset`, "
    "`!reel approve ID [once|session|always]`, `!reel deny ID [reason]`."
)


class ParsedCommand(msgspec.Struct, frozen=True, kw_only=True):
    name: CommandName
    target: str = ""
    """The approval id (approve, deny)."""
    scope: GrantScope = "once"
    reason: str = ""


class CommandSyntaxError(ValueError):
    """Not a command this version knows; the message is the answer to the sender."""


def parse(text: str) -> ParsedCommand:
    """``!reel ...`` -> the command, or :class:`CommandSyntaxError` with what to say."""
    words = text.strip().split()
    if not words or words[0].lower() != "!reel":
        raise CommandSyntaxError(HELP)
    if len(words) == 1:
        return ParsedCommand(name="help")
    name = words[1].lower()
    rest = words[2:]
    if name in ("status", "stop", "reset", "help"):
        if rest:
            raise CommandSyntaxError(f"`!reel {name}` takes no arguments. {HELP}")
        return ParsedCommand(name=name)  # type: ignore[arg-type]
    if name == "approve":
        if len(rest) not in (1, 2):
            raise CommandSyntaxError("usage: `!reel approve ID [once|session|always]`")
        scope = rest[1].lower() if len(rest) == 2 else "once"
        if scope not in GRANT_SCOPES:
            raise CommandSyntaxError("the scope is once, session or always")
        return ParsedCommand(name="approve", target=rest[0], scope=scope)
    if name == "deny":
        if not rest:
            raise CommandSyntaxError("usage: `!reel deny ID [reason]`")
        return ParsedCommand(name="deny", target=rest[0], reason=" ".join(rest[1:]))
    raise CommandSyntaxError(f"unknown command {name[:32]!r}. {HELP}")


# --- carrying them out (on the node's loop) -------------------------------------------------


async def execute(
    hub: CommandHub, channel: str, message: InboundMessage, principal: str, decision: Command
) -> tuple[str, str, str, str]:
    """``(command, target, outcome, answer)`` for one command: parsed, decided by Cedar for
    the sender (``channel.command``, or ``approval.resolve``), then done through the node."""
    try:
        parsed = parse(decision.text)
    except CommandSyntaxError as exc:
        return "help", "", "failed", str(exc)
    if parsed.name == "help":
        return "help", "", "done", HELP
    now = int(time.time() * 1000)
    who = Credentials(
        principal, hub.authority.tokens.roles_of(principal, now), f"channel:{channel}"
    )
    if parsed.name in ("approve", "deny"):
        return await _decide(hub, who, parsed)
    session_id = await _session_of(hub, decision.session_key)
    if session_id is None:
        return parsed.name, "", "failed", "This conversation has no session yet."
    session = await hub.fresh(lambda: hub.views.session(session_id))
    last_id = session.last_run_id if session is not None else None
    last = await hub.fresh(lambda: hub.views.run(last_id)) if last_id else None
    scope = (
        channel,
        {
            "command": parsed.name,
            "conversation": message.conversation,
            "session_id": session_id,
            "owner": session.principal if session else "",
            "run_id": last.run_id if last else "",
            "run_principal": last.principal if last else "",
        },
    )
    try:
        await hub.authority.permit(who, "channel.command", scope)
    except PermissionDenied as exc:
        return parsed.name, session_id, *_refused(exc)
    node = hub.node
    if parsed.name == "status":
        if last is None:
            return "status", session_id, "done", f"Session {session_id}: no runs yet."
        return (
            "status",
            session_id,
            "done",
            (
                f"Session {session_id}: {session.runs if session else 0} run(s); the last, "
                f"{last.run_id}, is {last.state}"
                + (f" ({last.termination_reason})" if last.termination_reason else "")
                + "."
            ),
        )
    if parsed.name == "stop":
        if last is None or last.state in TERMINAL_STATUSES:
            return "stop", session_id, "done", "No run is in progress."
        try:
            await asyncio.wrap_future(node.send(CancelRun(run_id=last.run_id, principal=principal)))
        except ActorsError as exc:
            return "stop", last.run_id, *_refused(exc)
        return "stop", last.run_id, "done", f"Run {last.run_id} is being cancelled."
    try:
        await asyncio.wrap_future(
            node.send(ResetSession(session_id=session_id, principal=principal))
        )
    except ActorsError as exc:
        return "reset", session_id, *_refused(exc)
    return "reset", session_id, "done", "Session reset: later messages start fresh."


async def _decide(
    hub: CommandHub, who: Credentials, parsed: ParsedCommand
) -> tuple[str, str, str, str]:
    """``!reel approve|deny``: ``approval.resolve`` for the sender, then the decision."""
    approval_id = parsed.target
    if not is_ulid(approval_id):
        return parsed.name, "", "failed", "That is not an approval id."
    record = await hub.fresh(lambda: hub.views.approval(approval_id))
    if record is None:
        return parsed.name, approval_id, "failed", f"No approval with id {approval_id}."
    decision: Verdict = "allow" if parsed.name == "approve" else "deny"
    scope = "once" if record.subject == "pairing" or decision == "deny" else parsed.scope
    try:
        await hub.authority.permit(
            who,
            "approval.resolve",
            hub.authority.approval_scope(record, decision, scope, "any"),
        )
    except AccessError as exc:
        return parsed.name, approval_id, *_refused(exc)
    command = ResolveApproval(
        approval_id=approval_id,
        decision=decision,
        scope=scope,
        principal=who.principal,
        reason=parsed.reason,
    )
    try:
        await asyncio.wrap_future(hub.node.send(command))
    except ActorsError as exc:
        return parsed.name, approval_id, *_refused(exc)
    verb = "approved" if decision == "allow" else "denied"
    return (
        parsed.name,
        approval_id,
        "done",
        f"Approval {approval_id} {verb} by {who.principal}.",
    )


def _refused(exc: Exception) -> tuple[CommandOutcome, str]:
    """What a command that failed records and answers: its kind's outcome, and why."""
    return OUTCOME[kind_of(exc) or "internal"], str(exc)


async def _session_of(hub: CommandHub, session_key: str) -> str | None:
    try:
        info: SessionInfo = await asyncio.wrap_future(
            hub.node.send(ResolveSession(session_key=session_key))
        )
    except UnknownSession:
        return None
    return info.session_id
