"""Errors as the HTTP API reports them: one JSON shape, one stable ``code``, one mapping.

:func:`to_api_error` is the single place where everything a handler can raise becomes a status
and a code: reel's own exceptions by their kind (:mod:`transports.failures`, through
:data:`STATUS`), then what only HTTP meets (msgspec validation, aiohttp's HTTP exceptions).
Handlers raise :class:`ApiError` for what they detect themselves.
"""

from __future__ import annotations

import re
from typing import Final

import msgspec
from aiohttp import web

from transports.failures import Kind, kind_of, public
from transports.http.bodies import ErrorBody, ErrorCode, ErrorDetail

STATUS: Final[dict[Kind, tuple[int, ErrorCode]]] = {
    "invalid_argument": (400, "invalid_argument"),
    "unauthenticated": (401, "unauthenticated"),
    "permission_denied": (403, "permission_denied"),
    "not_found": (404, "not_found"),
    "method_not_allowed": (405, "method_not_allowed"),
    "conflict": (409, "conflict"),
    "budget_exceeded": (429, "budget_exceeded"),
    "already_exists": (409, "conflict"),
    "payload_too_large": (413, "payload_too_large"),
    "unavailable": (503, "unavailable"),
    "unusable": (500, "internal"),
    "internal": (500, "internal"),
}
"""Each kind of failure as an HTTP status and the body's ``code``."""


class ApiError(Exception):
    """A request failed in a way the client should hear about: ``kind`` decides the status."""

    def __init__(
        self,
        kind: Kind,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: Kind = kind
        self.message = message
        self.field = field
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS[self.kind][0]

    @property
    def code(self) -> ErrorCode:
        return STATUS[self.kind][1]


def to_api_error(exc: BaseException) -> ApiError:
    """The API error for any exception a handler let through (``internal`` when unexpected)."""
    if isinstance(exc, ApiError):
        return exc
    if kind_of(exc) is not None:
        failure = public(exc)
        field = f"$.{failure.field}" if failure.field is not None else None
        return ApiError(failure.kind, failure.message, field)
    if isinstance(exc, msgspec.ValidationError):
        return _validation_error(exc)
    if isinstance(exc, msgspec.DecodeError):
        return ApiError("invalid_argument", f"the body is not valid JSON: {exc}", "$")
    if isinstance(exc, UnicodeDecodeError):
        return ApiError("invalid_argument", "the body is not UTF-8 JSON", "$")
    if isinstance(exc, web.RequestPayloadError):
        # aiohttp's message may quote the offending bytes: name the kind of fault only
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "malformed"
        return ApiError("invalid_argument", f"the request body could not be read ({cause})", "$")
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return ApiError("payload_too_large", "the request body is over the size limit")
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        return ApiError(
            "method_not_allowed",
            f"method {exc.method} is not allowed here; allowed: {allowed}",
            headers={"Allow": allowed},
        )
    if isinstance(exc, web.HTTPNotFound):
        return ApiError("not_found", "no such route")
    if isinstance(exc, web.HTTPException) and exc.status < 500:
        return ApiError("invalid_argument", exc.reason)
    return ApiError("internal", "internal error")


def _validation_error(exc: msgspec.ValidationError) -> ApiError:
    """msgspec says ``<problem> - at `$.a.b```; root-level problems name the field in the text."""
    text = str(exc)
    problem, sep, where = text.rpartition(" - at `")
    if sep:
        path = where.rstrip("`")
    else:
        problem, path = text, "$"
    named = re.match(r"Object (?:contains unknown|missing required) field `([^`]+)`", problem)
    if named:
        path = f"{path}.{named.group(1)}"
    return ApiError("invalid_argument", f"{problem} at {path}", path)


def error_response(error: ApiError) -> web.Response:
    """The JSON response for ``error`` (401s carry ``WWW-Authenticate: Bearer``)."""
    body = ErrorBody(error=ErrorDetail(code=error.code, message=error.message, field=error.field))
    response = web.Response(
        body=msgspec.json.encode(body),
        status=error.status,
        content_type="application/json",
        headers=error.headers,
    )
    if error.code == "unauthenticated":
        response.headers["WWW-Authenticate"] = 'Bearer realm="reel"'
    return response
