"""Which shard a command is for: the shard of the session it names, of the session its key
names, of the run or grant it changes.

A session lives in ``shard_of(session_id)`` with all its streams (:mod:`events.postgres.homes`).
A session key has a shard of its own, ``shard_of("key/" + key)``, and the session a key creates
gets an id drawn into that shard (:meth:`transports.cluster.membership.Membership.
new_session_id`): the key's owner is the session's owner, so one node decides whether a key is
taken. A command that makes a session without a key may run on any node owning a shard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from actors.approvals.always_grants import GRANTS_STREAM
from actors.messages import (
    CancelRun,
    CreateSession,
    ResolveApproval,
    ResolveSession,
    RevokeGrant,
    StallRun,
    StartRun,
)
from events.postgres.homes import shard_of


class ShardLookup(Protocol):
    """The one read a target needs of the journal (a :class:`~events.postgres.reader.
    PostgresReader`)."""

    shards: int

    def stream_shard(self, stream: str) -> int | None: ...


ANY_SHARD = None
"""The target of a command that makes a new session without a key: any shard this node owns."""


def served(shard: int | None, ready: frozenset[int]) -> bool:
    """Whether a command for ``shard`` runs here, ``ready`` being the shards this node serves
    (:data:`ANY_SHARD`: when it serves one)."""
    return bool(ready) if shard is ANY_SHARD else shard in ready


def key_shard(key: str, shards: int) -> int:
    """The shard deciding whether session key ``key`` is taken (and holding its session)."""
    return shard_of("key/" + key, shards)


def target(
    command: Any, journal: ShardLookup, session_of_approval: Callable[[str], str | None]
) -> int | None:
    """The shard ``command`` must run on (:data:`ANY_SHARD`: any this node owns). A run, grant
    or approval nobody has heard of yet is any shard's too: the directory there says it is
    unknown."""
    shards = journal.shards
    session_id = getattr(command, "session_id", None)
    if isinstance(command, (StartRun, ResolveSession, CreateSession)) and session_id is None:
        key = command.session_key
        return key_shard(key, shards) if key is not None else ANY_SHARD
    if isinstance(command, CancelRun | StallRun):
        return journal.stream_shard(f"run/{command.run_id}")
    if isinstance(command, ResolveApproval):
        session_id = session_of_approval(command.approval_id)
    if isinstance(command, RevokeGrant):
        found = journal.stream_shard(GRANTS_STREAM)
        return found if found is not None else shard_of(GRANTS_STREAM, shards)
    return shard_of(session_id, shards) if isinstance(session_id, str) else ANY_SHARD
