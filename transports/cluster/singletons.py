"""The singleton leases a cluster node takes for work one node does for all (imports nothing:
``/metrics`` names them on any node)."""

from __future__ import annotations

WATCHDOG = "watchdog"
"""The watchdog: incidents and, in ``auto`` mode, its acts, for every node's runs."""
SCHEDULES = "schedules"
"""The schedule desk's firing (every node changes schedules; one fires them)."""
SINGLETONS = (WATCHDOG, SCHEDULES)
