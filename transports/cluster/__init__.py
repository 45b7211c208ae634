"""Several nodes on one PostgreSQL journal (issue 24 step 3; docs/scale-out.md, "Serving").

Any node accepts any request. Reads come from its own views (they follow every node's appends).
A command for a session runs on the node holding the lease of the session's shard: here, or
forwarded over the internal gRPC service to that node, signed with this node's key and checked
against the key the sender's ``nodes`` row publishes.

* :mod:`.member`: the node's part in the cluster, composed (keeper, membership, service, router);
* :mod:`.membership`: the shards this node owns and has recovered, what it does when it acquires
  or loses one, and the ids of the sessions it creates (drawn into its own shards);
* :mod:`.targets`: which shard a command is for;
* :mod:`.wire`: the forwarded command and its answer on the wire, signed;
* :mod:`.router`: sends a command here or to its owner, retrying a move, then waits until this
  node's views show what the command wrote (read-your-writes);
* :mod:`.service`: the internal service that runs forwarded commands;
* :mod:`.latest`: the last position committed on any node, asked of the database by a read that
  found nothing (a row another node committed a moment ago).

Exceptions (:mod:`.errors`)::

    ClusterError
    ├── ClusterStartError    the internal service cannot listen
    ├── ForwardFailed        the owner could not be reached, or did not answer in time
    └── ForwardRefused       a forwarded command failed its signature, age or replay check
"""
