"""Which shard a command is for: the shard of the session it names, of the session its key
names, of the run or grant it changes.

A session lives in ``shard_of(session_id)`` with all its streams (:mod:`events.postgres.homes`).
A session key has a shard of its own, ``shard_of("key/" + key)``, and the session a key creates
gets an id drawn into that shard (:meth:`transports.cluster.membership.Membership.
new_session_id`): the key's owner is the session's owner, so one node decides whether a key is
taken. A command that makes a session without a key may run on any node owning a shard.

A channel's requests (a message, a pairing code) and the decision on a pairing it asked for
run on the node running the channel: the holder of the channel's singleton lease
(:func:`~transports.cluster.singletons.channel_singleton`), the target then being the lease's
name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from actors.approvals.always_grants import GRANTS_STREAM
from actors.channels.requests import CHANNEL_REQUESTS, channel_of
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
from projections.records import ApprovalRecord
from transports.cluster.singletons import channel_singleton

Target = int | str | None
"""Where a command runs: a shard, a singleton's name, or :data:`ANY_SHARD`."""


class ShardLookup(Protocol):
    """The one read a target needs of the journal (a :class:`~events.postgres.reader.
    PostgresReader`)."""

    shards: int

    def stream_shard(self, stream: str) -> int | None: ...


ANY_SHARD = None
"""The target of a command that makes a new session without a key: any shard this node owns."""


def served(target: Target, ready: frozenset[int], running: Callable[[str], bool]) -> bool:
    """Whether a command for ``target`` runs here, ``ready`` being the shards this node serves
    (:data:`ANY_SHARD`: when it serves one) and ``running(name)`` whether the work of the
    singleton ``name`` runs here now."""
    if isinstance(target, str):
        return running(target)
    return bool(ready) if target is ANY_SHARD else target in ready


def describe(target: Target) -> str:
    """``target`` in words, for an error."""
    if isinstance(target, str):
        return f"singleton {target}"
    return "any shard" if target is ANY_SHARD else f"shard {target}"


def key_shard(key: str, shards: int) -> int:
    """The shard deciding whether session key ``key`` is taken (and holding its session)."""
    return shard_of("key/" + key, shards)


def target(
    command: Any, journal: ShardLookup, approval: Callable[[str], ApprovalRecord | None]
) -> Target:
    """Where ``command`` must run: its shard (:data:`ANY_SHARD`: any this node owns), or for a
    channel's the channel's singleton (a pairing's approval too: ``approval(approval_id)``
    reads the approval's record). A run, grant or approval nobody has heard of yet is any
    shard's: the directory there says it is unknown."""
    shards = journal.shards
    if isinstance(command, CHANNEL_REQUESTS):
        return channel_singleton(channel_of(command))
    session_id = getattr(command, "session_id", None)
    if isinstance(command, (StartRun, ResolveSession, CreateSession)) and session_id is None:
        key = command.session_key
        return key_shard(key, shards) if key is not None else ANY_SHARD
    if isinstance(command, CancelRun | StallRun):
        return journal.stream_shard(f"run/{command.run_id}")
    if isinstance(command, ResolveApproval):
        record = approval(command.approval_id)
        if record is not None and record.subject == "pairing":
            return channel_singleton(str(record.arguments["channel"]))
        session_id = record.session_id if record is not None else None
    if isinstance(command, RevokeGrant):
        found = journal.stream_shard(GRANTS_STREAM)
        return found if found is not None else shard_of(GRANTS_STREAM, shards)
    return shard_of(session_id, shards) if isinstance(session_id, str) else ANY_SHARD
