"""``config_hash``: what every node of a cluster must agree on, as one digest (docs/scale-out.md,
"Same config on every node").

A command is authorised on the node a client reached and run on its session's owner, so two
nodes with different policies, tool postures or limits would answer one client two ways, and a
client could pick the laxer. Each node publishes the digest of its shared config and of the
policies it enforces in its ``nodes`` row; a node whose digest differs from a live node's
refuses to join unless ``[cluster] allow_config_change`` (for rolling a change through).

Shared: every section but those that are one node's own (its addresses and ports, its journal
connection and witness, its vault key file, its telemetry exporter, its views' reader limits, its
name and internal service), plus the cluster's TTL and ready ticks, the journal's shard count,
and the policies' digest (:attr:`policies.loader.LoadedPolicies.digest`: the baseline and the
operator's files as loaded).
"""

from __future__ import annotations

import hashlib

import msgspec

from transports.config import NodeConfig

LOCAL = frozenset({"http", "grpc", "journal", "cluster", "vault", "telemetry", "views"})
"""The sections that are one node's own."""


def config_hash(config: NodeConfig, policies_digest: str) -> str:
    """The hex SHA-256 of ``config``'s shared part and ``policies_digest``."""
    shared = {name: getattr(config, name) for name in config.__struct_fields__ if name not in LOCAL}
    shared["cluster"] = {"ttl_s": config.cluster.ttl_s, "ready_ticks": config.cluster.ready_ticks}
    shared["journal"] = {"shards": config.journal.shards}
    shared["policies"] = policies_digest
    return hashlib.sha256(msgspec.json.encode(shared, order="deterministic")).hexdigest()
