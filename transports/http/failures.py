"""Errors as the HTTP API reports them: one JSON shape, one stable ``code``, one mapping.

:func:`to_api_error` is the single place where everything a handler can raise (the actors' error
tree, journal errors, msgspec validation, aiohttp's own HTTP exceptions) becomes a status and a
code. Handlers raise :class:`ApiError` for what they detect themselves.
"""

from __future__ import annotations

import re

import msgspec
from aiohttp import web

from actors import Conflict, InvalidCommand, NodeDraining, NotFound
from events import AppendRejected, JournalClosed, JournalUnavailable
from policies import PolicyRequestError
from transports.access import NotFound as AccessNotFound
from transports.access import PermissionDenied
from transports.http.bodies import ErrorBody, ErrorCode, ErrorDetail
from transports.tokens import TokenAlreadyRevoked, TokenError, UnknownToken

STATUS: dict[ErrorCode, int] = {
    "unauthenticated": 401,
    "permission_denied": 403,
    "invalid_argument": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "conflict": 409,
    "payload_too_large": 413,
    "unavailable": 503,
    "internal": 500,
}


class ApiError(Exception):
    """A request failed in a way the client should hear about: ``code`` decides the status."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.field = field
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS[self.code]


def to_api_error(exc: BaseException) -> ApiError:
    """The API error for any exception a handler let through (``internal`` when unexpected)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, PermissionDenied):
        return ApiError("permission_denied", str(exc))
    if isinstance(exc, AccessNotFound):
        return ApiError("not_found", str(exc))
    if isinstance(exc, TokenError):  # the body's list of roles is "roles"
        field = "roles" if exc.field == "role" else exc.field
        return ApiError("invalid_argument", str(exc), f"$.{field}")
    if isinstance(exc, UnknownToken):
        return ApiError("not_found", str(exc))
    if isinstance(exc, TokenAlreadyRevoked):
        return ApiError("conflict", str(exc))
    if isinstance(exc, InvalidCommand):
        return ApiError("invalid_argument", str(exc), f"$.{exc.field}")
    if isinstance(exc, PolicyRequestError):  # a request value Cedar's context cannot hold
        return ApiError("invalid_argument", str(exc), f"$.{exc.field.rsplit('.', 1)[-1]}")
    if isinstance(exc, NotFound):
        return ApiError("not_found", str(exc))
    if isinstance(exc, Conflict):
        return ApiError("conflict", str(exc))
    if isinstance(exc, NodeDraining):
        return ApiError("unavailable", str(exc))
    if isinstance(exc, AppendRejected):
        return ApiError("invalid_argument", f"the journal refused the input: {exc}")
    if isinstance(exc, JournalClosed | JournalUnavailable):
        return ApiError("unavailable", "the journal is not available")
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
