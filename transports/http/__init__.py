"""reel's HTTP API (aiohttp): JSON over the views and the node's commands, Server-Sent Events
for a run's tape, OpenAPI, health, Prometheus metrics and the web console at ``/``.

Public surface::

    from transports.http import start_http, serve_http, HttpServer, build_app

    server = start_http(runtime)        # binds config.http.host:port on the node's I/O loop
    server.url                          # "http://127.0.0.1:8470"
    server.close()                      # or: await server.stop() on that loop

Routes and bodies are described in docs/http-api.md and served at ``/v1/openapi.json``.

Exceptions: handlers raise :class:`ApiError` (``code`` -> status); everything else is mapped by
:func:`transports.http.failures.to_api_error`, the one place that turns the actors' and the
journal's errors into HTTP statuses::

    ApiError(code)
        unauthenticated     401   missing or wrong bearer token
        invalid_argument    400   bad JSON, wrong type, unknown field, bad parameter (.field)
        not_found           404   unknown session, run, approval or route
        method_not_allowed  405
        conflict            409   actors.Conflict: already resolved, run ended, key taken
        payload_too_large   413   body over http.max_body_bytes
        unavailable         503   actors.NodeDraining, journal unavailable, node too slow
        internal            500   anything unexpected (logged without headers)

Starting: ``HttpStartError`` when the API cannot listen (port taken, a host not this machine's),
one line naming ``http.host`` and ``http.port``.

A request aiohttp cannot parse never reaches a handler: :mod:`transports.http.protocol` answers
it with the same JSON error (``invalid_argument``), never echoing the request's bytes.
"""

from transports.http.app import build_app
from transports.http.failures import ApiError, to_api_error
from transports.http.server import HttpServer, HttpStartError, serve_http, start_http

__all__ = [
    "ApiError",
    "HttpServer",
    "HttpStartError",
    "build_app",
    "serve_http",
    "start_http",
    "to_api_error",
]
