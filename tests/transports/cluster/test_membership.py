"""What a node does with its keeper's reports, in order (:mod:`transports.cluster.membership`):
a shard lost and taken anew before the membership thread looked (the database away past the
TTL, then back) is dropped first, what ran under the old token stopped, and only then
recovered. The keeper and the node are stand-ins recording what they are asked: the order of
those calls is the contract under test (the three-node tests run the real ones)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from typing import Any, cast

from actors.system.recovery import RecoveryReport
from events import new_id
from events.postgres.homes import shard_of
from events.postgres.leases import LeaseChange, LeaseKeeper, LeaseSettings
from transports.cluster.membership import Membership

SHARDS = 8
SHARD = 3


class Keeper:
    settings = LeaseSettings(ttl_s=2.0)

    def owned(self) -> dict[int, int]:
        return {SHARD: 8}


class RecordingNode:
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.calls: list[tuple[str, Any]] = []
        self.recovered = threading.Event()

    def release_shards(self, session: Callable[[str], bool]) -> None:
        self.calls.append(("release", session(self.session_id)))

    def recover_shards(self, shards: Collection[int]) -> RecoveryReport:
        self.calls.append(("recover", set(shards)))
        self.recovered.set()
        return RecoveryReport()


def test_a_shard_lapsed_and_taken_anew_in_one_batch_is_dropped_then_recovered() -> None:
    session_id = next(s for s in iter(new_id, None) if shard_of(s, SHARDS) == SHARD)
    membership = Membership()
    membership.shards = SHARDS
    membership.keeper = cast(LeaseKeeper, Keeper())
    membership.on_acquired(SHARD, 7)
    membership.on_change(LeaseChange(change="lapsed", at=0.0, incarnation=1, shard=SHARD))
    membership.on_acquired(SHARD, 8)  # all three queued before the thread looks: one batch
    node = RecordingNode(session_id)
    membership.start(cast(Any, node))
    try:
        assert node.recovered.wait(10)
    finally:
        membership.stop()
    # the session's actors of the lapsed tenure stopped, then the shard recovered
    assert node.calls == [("release", True), ("recover", {SHARD})]
    assert membership.ready() == {SHARD}
