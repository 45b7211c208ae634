"""``/v1/providers``: the model endpoints, their circuit states, and a test of each
(docs/providers.md, "Failover").

- ``GET /v1/providers`` (``node.read``): each endpoint of ``[[providers]]`` (or the one of
  ``[provider]``): kind, model, circuit state, consecutive failures, seconds until an open
  circuit probes, and the attempts that succeeded and failed since the node started. A node
  on the deterministic provider alone lists none.
- ``POST /v1/providers/test`` (``provider.test``, admins: it spends tokens): one tiny request to
  each endpoint, one after the other, no retry, no failover, circuits untouched; each with its
  latency and the model that answered, or the error.
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from actors.provider import ModelProvider
from transports.http.context import CONTEXT, permit
from transports.http.replies import json_reply
from transports.models.failover import EndpointStatus, FailoverProvider, ProbeResult

routes = web.RouteTableDef()


class EndpointList(msgspec.Struct, frozen=True):
    items: list[EndpointStatus]


class ProbeList(msgspec.Struct, frozen=True):
    items: list[ProbeResult]


def failover_of(provider: ModelProvider) -> FailoverProvider | None:
    """The node's failover provider (None: an injected or deterministic one)."""
    return provider if isinstance(provider, FailoverProvider) else None


@routes.get("/v1/providers")
async def list_providers(request: web.Request) -> web.Response:
    await permit(request, "node.read")
    failover = failover_of(request.app[CONTEXT].runtime.node.services.provider)
    return json_reply(EndpointList(items=failover.statuses() if failover else []))


@routes.post("/v1/providers/test")
async def test_providers(request: web.Request) -> web.Response:
    await permit(request, "provider.test")
    services = request.app[CONTEXT].runtime.node.services
    failover = failover_of(services.provider)
    results: list[ProbeResult] = []
    for endpoint in failover.endpoints if failover else []:
        # On the node's I/O loop, where the endpoint's connection pool lives.
        future = services.io.submit(failover.probe(endpoint))  # type: ignore[union-attr]
        results.append(await asyncio.wrap_future(future))
    return json_reply(ProbeList(items=results))
