"""Every route table of the API but the OpenAPI document's own, in matching order.

The app (:mod:`transports.http.app`) serves these after ``openapi.routes``; the OpenAPI document
(:mod:`transports.http.openapi`) names each operation after the handler that serves it, which it
finds here, so neither has to import the other.
"""

from __future__ import annotations

from transports.http import (
    approvals,
    channels,
    console,
    health,
    incidents,
    journal,
    learning,
    mcp,
    memory,
    metrics,
    postures,
    providers,
    runs,
    schedules,
    sessions,
    stream,
    tasks,
    tokens,
    usage,
    vault,
    whoami,
    workspace,
)

ROUTES = (
    sessions.routes,
    postures.routes,
    runs.routes,
    stream.routes,
    approvals.routes,
    incidents.routes,
    usage.routes,
    journal.routes,
    tokens.routes,
    vault.routes,
    schedules.routes,
    memory.routes,
    tasks.routes,
    learning.routes,
    mcp.routes,
    providers.routes,
    workspace.routes,
    whoami.routes,
    channels.routes,
    metrics.routes,
    health.routes,
    console.routes,  # last: its /{name} catches single-segment paths
)
