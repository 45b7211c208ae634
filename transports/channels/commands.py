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

from typing import Final, Literal

import msgspec

CommandName = Literal["status", "stop", "reset", "approve", "deny", "help"]

HELP: Final = (
    "Commands: `!reel status`, `!reel stop`, `!reel reset`, "
    "`!reel approve ID [once|session|always]`, `!reel deny ID [reason]`."
)


class ParsedCommand(msgspec.Struct, frozen=True, kw_only=True):
    name: CommandName
    target: str = ""
    """The approval id (approve, deny)."""
    scope: Literal["once", "session", "always"] = "once"
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
        if scope not in ("once", "session", "always"):
            raise CommandSyntaxError("the scope is once, session or always")
        return ParsedCommand(name="approve", target=rest[0], scope=scope)  # type: ignore[arg-type]
    if name == "deny":
        if not rest:
            raise CommandSyntaxError("usage: `!reel deny ID [reason]`")
        return ParsedCommand(name="deny", target=rest[0], reason=" ".join(rest[1:]))
    raise CommandSyntaxError(f"unknown command {name[:32]!r}. {HELP}")
