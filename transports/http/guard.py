"""The middleware every request passes: bearer auth, the body size cap, and error mapping.

- Every route but ``/healthz`` and the console's static files needs
  ``Authorization: Bearer <token>``: the data dir's ``admin.token`` or a token from
  ``reel tokens create`` / ``POST /v1/tokens``. A missing, unknown, expired or revoked token
  is the same 401 with ``WWW-Authenticate: Bearer`` (no oracle). Unknown paths need it too, so
  probing reveals nothing: one the console's catch-all (``/{name}``, ``/static/{path}``) finds
  no file for is a 404 only to a caller with a valid token. The caller's
  :class:`~transports.access.tokens.Credentials` are left on the request
  (:func:`~transports.http.context.caller`); each handler asks Cedar about its action
  (:func:`~transports.http.context.permit`).
- A query parameter the operation does not take (per ``/v1/openapi.json``), or one given twice,
  is a 400 naming it: a typo (``?limt=5``) is not silently ignored.
- A declared ``Content-Length`` over ``http.max_body_bytes`` is refused before reading (413);
  a chunked body is cut by aiohttp's ``client_max_size`` (also a 413).
- Whatever a handler raises becomes the JSON error of :mod:`transports.http.failures`. Logs name
  the method and path, never headers: the token cannot reach a log.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from transports.access.tokens import Credentials, bearer
from transports.http import channels, console, health
from transports.http.context import CALLER, CONTEXT
from transports.http.failures import ApiError, error_response, to_api_error
from transports.http.openapi import query_parameters

log = logging.getLogger("reel.http")

PUBLIC_ROUTES = console.PUBLIC_ROUTES | health.PUBLIC_ROUTES | channels.PUBLIC_ROUTES


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    route = request.match_info.route.name
    try:
        if route not in PUBLIC_ROUTES:
            request[CALLER] = authenticated(request)
        if request.query:
            check_query(request)
        length = request.content_length
        if length is not None and length > request.client_max_size:
            raise ApiError(
                "payload_too_large",
                f"the request body is {length} bytes; the limit is {request.client_max_size}",
            )
        return await handler(request)
    except Exception as exc:
        error = to_api_error(exc)
        if error.code == "not_found" and route in console.PUBLIC_ROUTES:
            try:
                authenticated(request)  # a path the console does not serve: strangers get 401
            except ApiError as refused:
                error = refused
        if error.code == "internal":
            log.error("internal error on %s %s", request.method, request.path, exc_info=exc)
        return error_response(error)


def authenticated(request: web.Request) -> Credentials:
    """Who the request's bearer token speaks for, else the one 401 for every bad token."""
    authority = request.app[CONTEXT].authority
    who = authority.authenticate(bearer(request.headers.get("Authorization")))
    if who is None:
        raise ApiError("unauthenticated", "a valid bearer token is required")
    return who


def check_query(request: web.Request) -> None:
    """Refuse query parameters the matched operation does not take, or takes once."""
    if request.match_info.route.name in PUBLIC_ROUTES:
        return
    resource = request.match_info.route.resource
    if resource is None:
        return
    taken = query_parameters().get((request.method, resource.canonical))
    if taken is None:  # a route the document does not describe (405s, 404s)
        return
    seen: set[str] = set()
    for name, _ in request.query.items():  # every occurrence, not unique keys
        field = f"query.{name[:32]}"
        if name not in taken:
            known = ", ".join(sorted(taken)) or "none"
            raise ApiError(
                "invalid_argument",
                f"unknown query parameter {name[:32]!r} (this operation takes: {known})",
                field,
            )
        if name in seen:
            raise ApiError("invalid_argument", f"{name} is given more than once", field)
        seen.add(name)
