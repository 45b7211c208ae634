"""The cluster transport's exceptions (the tree is drawn in :mod:`transports.cluster`)."""

from __future__ import annotations


class ClusterError(Exception):
    """Base of the errors of forwarding commands between the nodes of a cluster."""


class ForwardFailed(ClusterError):
    """The node owning the command's session could not be reached, or did not answer in time.
    When the command was sent it may or may not have run; nothing is retried after that."""


class ForwardRefused(ClusterError):
    """A forwarded command was refused unread: not signed by a live node's key, too old, or a
    replay of one already run."""


class ClusterStartError(ClusterError):
    """The internal service cannot listen (the message names ``cluster.host``/``cluster.port``)."""
