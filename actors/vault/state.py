"""The vault's state: every secret's name, revision and history, folded from ``vault.*`` events
(an :class:`actors.aggregate.Aggregate` over every ``vault/<name>`` stream).

The journal never holds a value, so neither does this state: the values are in the encrypted
box (:mod:`actors.vault.store`), one file per name and revision.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from actors.stream import Recorded
from events.catalog import VaultSecretDeleted, VaultSecretRotated, VaultSecretSet

STREAM_PREFIX = "vault/"


def stream_of(name: str) -> str:
    """The stream of the secret ``name``: only the vault's writer appends to it."""
    return f"{STREAM_PREFIX}{name}"


class SecretRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One secret as the journal describes it (never its value)."""

    name: str
    revision: int
    """1 when first set, one more at each rotation; kept across a delete and a new set."""
    created_at_ms: int
    updated_at_ms: int
    updated_by: str
    """Who set, rotated or deleted it last."""
    deleted: bool = False
    next_seq: int = 0
    """The seq the next event of ``vault/<name>`` takes."""


class VaultState(msgspec.Struct, frozen=True):
    """Every secret the journal names, deleted ones included, by name."""

    secrets: Mapping[str, SecretRecord] = msgspec.field(default_factory=dict)

    def live(self) -> list[SecretRecord]:
        """The secrets that exist now, by name."""
        return sorted((r for r in self.secrets.values() if not r.deleted), key=lambda r: r.name)

    def get(self, name: str) -> SecretRecord | None:
        """The secret ``name`` if it exists now (not deleted)."""
        record = self.secrets.get(name)
        return None if record is None or record.deleted else record


def initial(first: Recorded) -> VaultState:
    """The vault after ``first`` (every record starts it, empty or not)."""
    return apply(VaultState(), first)


def apply(state: VaultState, rec: Recorded) -> VaultState:
    """``state`` after ``rec``; records of other kinds, or of a stream that is not the secret's,
    change nothing."""
    event = rec.event
    if not isinstance(event, VaultSecretSet | VaultSecretRotated | VaultSecretDeleted):
        return state
    if rec.stream != stream_of(event.name):
        return state
    old = state.secrets.get(event.name)
    seq = old.next_seq + 1 if old is not None else 1
    if isinstance(event, VaultSecretSet):
        record = SecretRecord(
            name=event.name,
            revision=event.revision,
            created_at_ms=rec.at_ms,
            updated_at_ms=rec.at_ms,
            updated_by=rec.principal,
            next_seq=seq,
        )
    elif old is None:
        return state  # a rotation or delete of a secret never set: nothing to change
    else:
        record = msgspec.structs.replace(
            old,
            revision=event.revision,
            updated_at_ms=rec.at_ms,
            updated_by=rec.principal,
            deleted=isinstance(event, VaultSecretDeleted),
            next_seq=seq,
        )
    return VaultState({**state.secrets, event.name: record})
