"""Identifiers in commands, checked where they enter the actor system.

A session key or a channel is stored in clear (it names a session, it is matched in policy), so
the journal refuses one that does not match its strict pattern or looks like a secret
(:mod:`events.fields`). The directory checks commands against the same rules before anything
is appended, so a caller hears :class:`InvalidCommand` naming the field (HTTP 400 with
``$.session_key``, gRPC ``INVALID_ARGUMENT``) instead of a session failing halfway.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from actors.errors import InvalidCommand
from events.fields import CHANNEL, SESSION_KEY, Identifier
from events.redaction.redact import looks_secret

_CHECKED: tuple[tuple[str, Identifier], ...] = (
    ("session_key", SESSION_KEY),
    ("channel", CHANNEL),
)


def check_identifiers(command: Any, known_keys: Container[str] = ()) -> InvalidCommand | None:
    """The error for the first identifier field of ``command`` that the journal would refuse,
    else None. The message names the field and the rule, never the value. A session key in
    ``known_keys`` (stored before these rules) is let through: it names an existing session."""
    for field, kind in _CHECKED:
        value = getattr(command, field, None)
        if value is None or (field == "session_key" and value in known_keys):
            continue
        problem = kind.problem(value, looks_secret)
        if problem is not None:
            return InvalidCommand(field, problem)
    return None
