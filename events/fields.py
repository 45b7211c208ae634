"""What each field of an event may hold: free text (redacted) or an identifier (checked).

Redaction is structural: every ``str`` an event carries is redacted before it is stored
(message text, answers, reasons, tool arguments and results, dict keys and values, the
strings of tuples), unless the catalog types the field as an identifier. An identifier
(:data:`Id`, :data:`SessionKey`, :data:`Channel`, :data:`ToolName`, :data:`Principal`) must
match its strict pattern and must not look like a secret; otherwise the append is refused with
:class:`InvalidField`, which names the event kind and the field, never the value. ``Literal``
fields must hold one of their values. Nothing else is exempt, so a field someone adds later is
redacted unless they declare it an identifier: forgetting is safe.

The plan for a class (which fields to redact, which to check) is derived once from its type
annotations (:func:`plan_of`); ``tests/events/redaction/test_redaction_structure.py`` walks every
class of the catalog and every string-bearing field and proves each is redacted or refused.
"""

from __future__ import annotations

import functools
import re
import types
import typing
from typing import Annotated, Any, Literal, NamedTuple, Union

from events.errors import AppendRejected

REASON_MAX_CHARS = 1000
"""The longest reason a person may give for a decision reel records (a memory item's deletion,
a token's revocation, a learning review): checked at the edge, naming the field."""


class Identifier(NamedTuple):
    """A kind of identifier: what it is, and the pattern a value must match in full."""

    what: str
    pattern: re.Pattern[str]
    secret_checked: bool = True
    """Also refuse a value the redactor would change (a matching token shape)."""

    def problem(self, value: object, looks_secret: typing.Callable[[str], bool]) -> str | None:
        """Why ``value`` is not a valid identifier of this kind, or None. Never quotes it."""
        if not isinstance(value, str):
            return f"must be text ({self.what}), not {type(value).__name__}"
        if self.pattern.fullmatch(value) is None:
            return (
                f"is not a valid {self.what} ({len(value)} characters; "
                f"must match {self.pattern.pattern})"
            )
        if self.secret_checked and looks_secret(value):
            return f"looks like a secret, and a {self.what} is stored in clear: refused"
        return None


ID = Identifier("id", re.compile(r"[0-9A-Za-z][0-9A-Za-z_.:-]{0,63}"), secret_checked=False)
"""ids reel makes (ULIDs): sessions, runs, invocations, approvals, tokens."""
SESSION_KEY = Identifier("session key", re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}"))
"""A client's name for a session (``telegram:1234``, ``alice@example.com``, ``team/proj``)."""
CHANNEL = Identifier("channel", re.compile(r"[a-z][a-z0-9_.-]{0,31}"))
"""Where a message came from (``http``, ``grpc``, ``cli``, ``telegram``)."""
TOOL_NAME = Identifier(
    "tool name", re.compile(r"(?=.{1,128}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*")
)
"""A catalog tool name (``fs.read``, ``example.json_echo``)."""
PRINCIPAL = Identifier("principal", re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=/-]{0,127}"))
"""Who acted (``operator``, ``node``, ``user:alice``, a chat sender
``channel:matrix:@alice:example.org``). ``=`` and ``/`` are there for chat platforms' user ids
(a Matrix localpart may hold both); a value shaped like a token is still refused."""

VAULT_NAME = Identifier("vault secret name", re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}"))
"""A secret's name in the vault (``github_token``, ``GH.deploy-key``): what handles name
(``{"vault": NAME}``, ``${vault:NAME}``) and what the journal records instead of the value. A
name shaped like a secret is refused, so a value pasted as a name is never stored."""

PLATFORM_ID = Identifier("platform id", re.compile(r"[!-~]{1,255}"), secret_checked=False)
"""An id a chat platform made (a Matrix event or room id, a webhook's message id): printable
ASCII without spaces. Not scanned for secrets: platforms make ids that look like tokens (about
1 in 50 Matrix ids did), and redacting one would send a reply to a masked room. Such a field
is never free text: a value outside the pattern is refused, so no prose or secret with a space,
quote-free JSON or newline fits, and platform ids are not secrets by themselves."""

Id = Annotated[str, ID]
PlatformId = Annotated[str, PLATFORM_ID]
SessionKey = Annotated[str, SESSION_KEY]
Channel = Annotated[str, CHANNEL]
ToolName = Annotated[str, TOOL_NAME]
Principal = Annotated[str, PRINCIPAL]
VaultName = Annotated[str, VAULT_NAME]

INVALID_TOOL_NAME = "invalid_tool_name"
"""Recorded instead of a tool name a model proposed that is not a valid tool name (the model's
own text is kept, redacted, in ``run.turn_completed``)."""


class InvalidField(AppendRejected):
    """An event field holds what its type forbids (an identifier that does not match its
    pattern or looks like a secret, a value outside a ``Literal``). Nothing was written.
    ``kind`` and ``field`` name where; the message never quotes the value."""

    def __init__(self, kind: str, field: str, problem: str) -> None:
        super().__init__(f"{kind}: field {field!r} {problem}")
        self.kind = kind
        self.field = field
        self.problem = problem


# --- plans ------------------------------------------------------------------------------------


class Text(NamedTuple):
    """Redact the value (a string, or any JSON-like value holding strings)."""


class Check(NamedTuple):
    """Check the value (or each item of a tuple) as an identifier of ``kind``."""

    kind: Identifier
    many: bool = False


class OneOf(NamedTuple):
    """The value (or each item) must be one of ``allowed``."""

    allowed: frozenset[object]
    many: bool = False


Rule = Text | Check | OneOf


class Plan(NamedTuple):
    """What redaction does with one event class: ``(field, rule)`` for every field that holds
    strings; fields of numbers, booleans and bytes need nothing."""

    rules: tuple[tuple[str, Rule], ...]

    @property
    def text_fields(self) -> tuple[str, ...]:
        return tuple(name for name, rule in self.rules if isinstance(rule, Text))


_SCALARS = (int, float, bool, bytes, type(None))


def _rule(tp: Any, many: bool = False) -> Rule | None:
    """The rule for a field annotation (None: holds no strings)."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        kinds = [m for m in meta if isinstance(m, Identifier)]
        if kinds and base is str:
            return Check(kinds[0], many)
        return _rule(base, many)
    if origin in (Union, types.UnionType):
        rules = [_rule(arg, many) for arg in typing.get_args(tp) if arg is not type(None)]
        present = [r for r in rules if r is not None]
        if len(present) == 1:
            return present[0]
        return Text() if present else None
    if origin is Literal:
        return OneOf(frozenset(typing.get_args(tp)), many)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and not many:
            inner = _rule(args[0], True)
            return inner if not isinstance(inner, Text) else Text()
        return Text()
    if isinstance(tp, type) and issubclass(tp, _SCALARS) and tp is not str:
        return None
    return Text()  # str, Any, dict, list, anything else: redacted


@functools.cache
def plan_of(cls: type) -> Plan:
    """The plan for an event class, from its annotations (cached)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    rules: list[tuple[str, Rule]] = []
    for name in getattr(cls, "__struct_fields__", ()):
        if name == "redacted":
            continue
        rule = _rule(hints[name])
        if rule is not None:
            rules.append((name, rule))
    return Plan(tuple(rules))
