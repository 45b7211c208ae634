"""Where each shard should live: rendezvous hashing over the live nodes with bounded load.

Pure and deterministic: every node computes the same placement from the same inputs (the shard
count and the names of the nodes that may own shards), so nodes agree on where a shard goes
without talking to each other. Each shard ranks the nodes by ``sha256(node/shard)``
(rendezvous, or highest-random-weight, hashing: a node's arrival or departure moves mostly the
shards it wins or held; the bound on load moves a few more) and goes to the best-ranked node
that still has room, room being ``ceil(S / nodes * (1 + SLACK))`` (bounded load: no node gets
far more than its share however the hashes fall).

Placement is a target, not an order: :mod:`events.postgres.leases` acquires only free shards
whose target is itself, and hands over a shard it holds whose target is another node one at a
time (hysteresis: a node back from a pause is no target until it has renewed for a few healthy
ticks, so a flapping node does not pull shards back and forth).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection

SLACK = 0.25
"""How far above an even share a node's load may go (bounded-load rendezvous)."""


def score(node: str, shard: int) -> int:
    """The rendezvous weight of ``node`` for ``shard``: the first 8 bytes of SHA-256."""
    return int.from_bytes(hashlib.sha256(f"{node}/{shard}".encode()).digest()[:8], "big")


def capacity(shards: int, nodes: int) -> int:
    """The most shards one of ``nodes`` nodes may be given."""
    return math.ceil(shards / nodes * (1 + SLACK)) if nodes else 0


def place(shards: int, nodes: Collection[str]) -> dict[int, str]:
    """Each shard's target among ``nodes`` (empty when there are none)."""
    if not nodes:
        return {}
    room = capacity(shards, len(nodes))
    load = dict.fromkeys(nodes, 0)
    targets: dict[int, str] = {}
    for shard in range(shards):
        for node in sorted(nodes, key=lambda n: (-score(n, shard), n)):
            if load[node] < room:
                targets[shard] = node
                load[node] += 1
                break
    return targets
