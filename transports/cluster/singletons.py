"""The singleton leases a cluster node takes for work one node does for all: the watchdog, the
schedules and each chat channel (imports nothing:
``/metrics`` names them on any node)."""

from __future__ import annotations

WATCHDOG = "watchdog"
"""The watchdog: incidents and, in ``auto`` mode, its acts, for every node's runs."""
SCHEDULES = "schedules"
"""The schedule desk's firing (every node changes schedules; one fires them)."""
SINGLETONS = (WATCHDOG, SCHEDULES)

CHANNEL_PREFIX = "channel:"


def channel_singleton(channel: str) -> str:
    """The singleton lease a channel runs under: its connector and its actor run on the node
    holding it, and every other node sends that node the channel's messages
    (:mod:`actors.channels.requests`)."""
    return CHANNEL_PREFIX + channel


def channel_named(singleton: str) -> str | None:
    """The channel whose singleton ``singleton`` is, or ``None`` for another singleton."""
    return singleton[len(CHANNEL_PREFIX) :] if singleton.startswith(CHANNEL_PREFIX) else None
