"""``/v1/mcp/servers``: the configured MCP servers, their state and tools (docs/mcp.md).

- ``GET /v1/mcp/servers`` (``tool.list``): every server, its state, why it failed, and each
  tool it announced or config names, with whether it is allowed and its posture.
- ``POST /v1/mcp/servers/{server}/test`` (``mcp.test``): start the server if it is not running
  (a failed one at once), read its tool list again; the server after. 404 for a name
  that is not configured.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from tools.mcp.server import ServerState
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.replies import json_reply
from transports.mcp_servers import McpServerRow, mcp_runtime, server_rows

routes = web.RouteTableDef()

TEST_TIMEOUT_S = 30.0


@routes.get("/v1/mcp/servers")
async def list_mcp_servers(request: web.Request) -> web.Response:
    await permit(request, "tool.list")
    services = request.app[CONTEXT].runtime.node.services
    return json_reply(server_rows(services.catalog, services.gate.posture))


@routes.post("/v1/mcp/servers/{server}/test")
async def test_mcp_server(request: web.Request) -> web.Response:
    name = request.match_info["server"]
    services = request.app[CONTEXT].runtime.node.services
    runtime = mcp_runtime(services.catalog)
    if runtime is None or name not in runtime.servers:
        raise ApiError("not_found", f"server: no MCP server {name!r} is configured", "server")
    await permit(request, "mcp.test")
    state: ServerState = await asyncio.to_thread(runtime.test, name, TEST_TIMEOUT_S)
    rows = server_rows(services.catalog, services.gate.posture).items
    row: McpServerRow = next(r for r in rows if r.name == state.name)
    return json_reply(row)
