"""Vault handles: how a tool call names a secret without holding it.

A value that a tool sends on (an ``http.fetch`` header, a ``shell.run`` environment variable)
may be a handle instead of text: ``{"vault": "NAME"}`` (the whole value is the secret) or text
holding ``${vault:NAME}`` (replaced in place, ``"Bearer ${vault:gh}"``). The call's arguments,
as the model proposed them and the journal records them, carry only the name. The runtime
resolves it at execution, through ``ExecutionContext.secrets`` (the node's vault), and nowhere
else; a name the vault does not hold is a tool error naming the handle, before anything runs.

Which names a call uses (:func:`handles_of`) is what the node asks Cedar about (``vault.use``,
per principal, tool and name) with the tool decision. An argument type lists its names by a
``handles()`` method; this module's :func:`names_in` reads them out of one value. A name is
not checked here (tools import nothing of reel's): the vault holds only names of its pattern
(``events.fields.VAULT_NAME``), so any other is "no such secret".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import msgspec

from tools.result import ToolFault

__all__ = [
    "HandleValue",
    "MissingSecret",
    "Secrets",
    "VaultHandle",
    "handles_of",
    "names_in",
    "names_of",
    "resolve",
    "resolve_all",
]


# The docstring is the argument schema's description, which the model reads: plain text.
class VaultHandle(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """{"vault": "NAME"}: the value of the vault secret NAME."""

    vault: str


HandleValue = str | VaultHandle
"""A value that may name a secret: text (with ``${vault:NAME}`` in it) or a handle."""

_IN_TEXT = re.compile(r"\$\{vault:([^}]*)\}")


class MissingSecret(LookupError):
    """The vault holds no secret of this name (raised by a :data:`Secrets` lookup)."""


Secrets = Callable[[str], str]
"""The value of the secret named by its argument, or :class:`MissingSecret`."""


def names_in(value: HandleValue) -> tuple[str, ...]:
    """The secret names ``value`` refers to, in order of appearance."""
    if isinstance(value, VaultHandle):
        return (value.vault,)
    return tuple(_IN_TEXT.findall(value))


def handles_of(args: object) -> tuple[str, ...]:
    """The secret names a validated call uses (its type's ``handles()``), sorted, each once."""
    method = getattr(args, "handles", None)
    return tuple(sorted(set(method()))) if callable(method) else ()


def resolve(value: HandleValue, secrets: Secrets | None, field: str) -> str:
    """``value`` with its handles replaced by their secrets. A handle the vault does not hold
    (or a node with no vault) is a :class:`ToolFault` ``invalid`` naming ``field`` and the
    handle, never a value."""
    if isinstance(value, str) and "${vault:" not in value:
        return value

    def lookup(name: str) -> str:
        if secrets is None:
            raise ToolFault(
                "invalid", f"{field}: vault handle {name[:64]!r}: no vault on this node"
            )
        try:
            return secrets(name)
        except MissingSecret:
            raise ToolFault(
                "invalid", f"{field}: vault handle {name[:64]!r} names no secret"
            ) from None

    if isinstance(value, VaultHandle):
        return lookup(value.vault)
    return _IN_TEXT.sub(lambda m: lookup(m.group(1)), value)


def resolve_all(
    values: Mapping[str, HandleValue], secrets: Secrets | None, field: str
) -> dict[str, str]:
    """Every value of ``values`` resolved (:func:`resolve`); ``field`` prefixes each key."""
    return {key: resolve(value, secrets, f"{field}.{key}") for key, value in values.items()}


def names_of(values: Iterable[HandleValue]) -> list[str]:
    """The names every value of ``values`` refers to (for an argument type's ``handles()``)."""
    return [name for value in values for name in names_in(value)]
