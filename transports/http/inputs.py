"""Reading request input: JSON bodies, path ids, query parameters and the paging rules.

Bodies are decoded straight into the request Structs (``forbid_unknown_fields``); the failure
is mapped to a 400 naming the field by :mod:`transports.http.failures`. A body must be JSON
(``Content-Type`` absent, ``application/json`` or ``application/*+json``, UTF-8), and a string
holding bytes that are not UTF-8 is a 400 naming that string's path (``$.text``). Query
parameters are checked here and name themselves as ``query.<name>``.

A parameter that is present must be valid: ``?after=`` (empty) is an error, not "absent".

Paging: ``limit`` defaults to 50; above the cap (1000 for a tape, 200 for lists) it is lowered
to the cap and the response says so (``limit_clamped``); below 1 it is an error.

Filters: a list's filters are declared once here (:data:`APPROVAL_FILTERS`,
:data:`RUN_FILTERS`): the handler reads them into the view's filter
(:func:`query_filter`) and ``/v1/openapi.json`` lists them from the same table. A parameter an
operation does not take at all is refused before any handler runs, by the guard, against that
document (:func:`transports.http.guard.check_query`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, NamedTuple, TypeVar

import msgspec
from aiohttp import web

from events.fields import PRINCIPAL, REASON_MAX_CHARS, SESSION_KEY, TOOL_NAME, Identifier
from events.lifecycle import RunStatus
from events.redaction.redact import looks_secret
from projections import APPROVAL_STATES, ApprovalFilter, RunFilter, SessionFilter
from transports.http.bodies import ULID_PATTERN
from transports.http.failures import ApiError

T = TypeVar("T", bound=msgspec.Struct)

DEFAULT_LIMIT = 50
LIST_CAP = 200
TAPE_CAP = 1000
MAX_SEQ = (1 << 62) - 1
"""Larger tape positions cannot exist (and would overflow SQLite's integers)."""
_INTEGER = re.compile(r"-?[0-9]{1,19}")
_ULID = re.compile(r"[0-7][0-9A-HJKMNP-TV-Za-hjkmnp-tv-z]{25}")
"""What :func:`events.is_ulid` accepts, as a regular expression (a tenth of its cost)."""


def is_ulid(text: str) -> bool:
    return _ULID.fullmatch(text) is not None


@cache
def _decoder(kind: type[Any]) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(kind)


async def read_body(request: web.Request, kind: type[T], *, optional: bool = False) -> T:
    """Decode the request body as ``kind``; an empty body is ``kind()`` when ``optional``."""
    raw = await request.read()
    if not raw:
        if optional:
            return kind()
        raise ApiError("invalid_argument", "a JSON object body is required", "$")
    json_content_type(request)
    try:
        body: T = _decoder(kind).decode(raw)
    except UnicodeDecodeError:
        raise not_utf8(raw) from None
    return body


def json_content_type(request: web.Request) -> None:
    """Refuse a body declared as anything but UTF-8 JSON (an absent type is taken as JSON)."""
    if "Content-Type" not in request.headers:
        return
    kind = request.content_type.lower()
    charset = (request.charset or "utf-8").lower()
    top, _, sub = kind.partition("/")
    if not (kind == "application/json" or (top == "application" and sub.endswith("+json"))):
        raise ApiError(
            "invalid_argument",
            f"the body must be JSON (Content-Type: application/json), not {kind[:64]!r}",
            "header.Content-Type",
        )
    if charset not in ("utf-8", "utf8"):
        raise ApiError(
            "invalid_argument",
            f"the body must be UTF-8 JSON, not charset {charset[:32]!r}",
            "header.Content-Type",
        )


def not_utf8(raw: bytes) -> ApiError:
    """The error for a body with bytes that are not UTF-8: the path of the string (value or key)
    that holds them when the rest is JSON, else the body itself. Never echoes the bytes."""
    try:
        # surrogateescape turns each bad byte into a lone surrogate, which stdlib json keeps
        document = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError):
        return ApiError("invalid_argument", "the body is not UTF-8 JSON", "$")
    found = _escaped_string(document)
    if found is None:  # cannot happen: the bad bytes are in some string
        return ApiError("invalid_argument", "the body is not UTF-8 JSON", "$")
    path, in_key = found
    what = f"a key of the object at {path}" if in_key else f"the string at {path}"
    return ApiError("invalid_argument", f"{what} is not valid UTF-8", path)


def _escaped_string(document: Any) -> tuple[str, bool] | None:
    """The msgspec-style path (``$.a[0].b``) of the first string holding an escaped byte, and
    whether it is an object's key; iterative, so nesting depth costs no recursion."""
    stack: list[tuple[str, Any]] = [("$", document)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if _BAD_BYTE.search(value):
                return path, False
        elif isinstance(value, dict):
            for key, item in reversed(value.items()):
                if _BAD_BYTE.search(key):
                    return path, True
                stack.append((f"{path}.{key[:64]}", item))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", item) for i, item in reversed(list(enumerate(value))))
    return None


_BAD_BYTE = re.compile("[\udc80-\udcff]")
"""What ``surrogateescape`` decodes a byte that is not UTF-8 to."""


def identifier(value: str | None, field: str, kind: Identifier = SESSION_KEY) -> str | None:
    """``value`` when it is a valid ``kind`` (the journal stores identifiers in clear and
    refuses any that does not fit its pattern or looks like a secret); else a 400 naming
    ``field`` that never quotes the value."""
    if value is None:
        return None
    problem = kind.problem(value, looks_secret)
    if problem is not None:
        raise ApiError("invalid_argument", f"{field.removeprefix('$.')} {problem}", field)
    return value


def path_id(request: web.Request, name: str, what: str) -> str:
    """A ULID from the path; anything else cannot name a ``what`` (404, not 400)."""
    value = request.match_info[name]
    if not is_ulid(value):
        raise ApiError("not_found", f"no {what} with id {value[:64]!r}")
    return value


class Limit(NamedTuple):
    value: int
    clamped: bool


def page_limit(request: web.Request, cap: int) -> Limit:
    """The page size: ``limit`` (default 50) lowered to ``cap`` when above it."""
    raw = request.query.get("limit")
    if raw is None:
        return Limit(min(DEFAULT_LIMIT, cap), False)
    value = _integer(raw, "limit")
    if value < 1:
        raise ApiError("invalid_argument", "limit must be at least 1", "query.limit")
    if value > MAX_SEQ:
        raise ApiError("invalid_argument", f"limit must be at most {MAX_SEQ}", "query.limit")
    if value > cap:
        return Limit(cap, True)
    return Limit(value, False)


def after_id(request: web.Request) -> str | None:
    """The list cursor: the last id of the previous page (a ULID) or nothing."""
    raw = request.query.get("after")
    if raw is None:
        return None
    if not is_ulid(raw):
        raise ApiError(
            "invalid_argument", "after must be an id from a previous page", "query.after"
        )
    return raw


def after_seq(request: web.Request) -> int:
    """The tape cursor from ``?after=`` (default -1: from the start)."""
    raw = request.query.get("after")
    if raw is None:
        return -1
    return seq_value(raw, "query.after")


def seq_value(raw: str, field: str) -> int:
    """A tape sequence number (-1 means "before the first entry")."""
    value = _integer(raw, field.rpartition(".")[2], field)
    if not -1 <= value <= MAX_SEQ:
        raise ApiError("invalid_argument", f"{field} must be between -1 and {MAX_SEQ}", field)
    return value


def _integer(raw: str, name: str, field: str | None = None) -> int:
    where = field or f"query.{name}"
    text = raw.strip()
    if not _INTEGER.fullmatch(text):
        raise ApiError("invalid_argument", f"{name} must be an integer, got {raw[:32]!r}", where)
    return int(text)


# --- filters -----------------------------------------------------------------------------------

Check = Callable[[str, str], str]
"""A filter's check: ``(raw value, field)`` -> the value, or a 400 naming ``field``."""


class QueryFilter(NamedTuple):
    """One filter a list takes as a query parameter: ``name`` is both the parameter and the field
    of the view's filter (a column: an exact match); ``schema`` and ``description`` are its
    ``/v1/openapi.json`` entry, no looser than ``check`` (a schemathesis check holds them to it)."""

    name: str
    description: str
    check: Check
    schema: Mapping[str, Any]


def _one_of(name: str, values: tuple[str, ...]) -> Check:
    def check(raw: str, field: str) -> str:
        if raw not in values:
            raise ApiError("invalid_argument", f"{name} must be one of {', '.join(values)}", field)
        return raw

    return check


def _an_id(name: str, what: str) -> Check:
    def check(raw: str, field: str) -> str:
        if not is_ulid(raw):
            raise ApiError("invalid_argument", f"{name} must be a {what} id (a ULID)", field)
        return raw

    return check


def _an_identifier(kind: Identifier) -> Check:
    def check(raw: str, field: str) -> str:
        identifier(raw, field, kind)
        return raw

    return check


_ULID_SCHEMA: Mapping[str, Any] = {"type": "string", "pattern": ULID_PATTERN}
_TOOL_SCHEMA: Mapping[str, Any] = {
    "type": "string",
    "maxLength": 128,
    "pattern": "^[a-z][a-z0-9_]*(?:\\.[a-z][a-z0-9_]*)*$",
}
_PRINCIPAL_SCHEMA: Mapping[str, Any] = {
    "type": "string",
    "pattern": f"^{PRINCIPAL.pattern.pattern}$",
}

APPROVAL_FILTERS: tuple[QueryFilter, ...] = (
    QueryFilter(
        "state",
        "Only pending, or only resolved, approvals.",
        _one_of("state", APPROVAL_STATES),
        {"enum": list(APPROVAL_STATES)},
    ),
    QueryFilter(
        "run_id", "Only the approvals this run asked for.", _an_id("run_id", "run"), _ULID_SCHEMA
    ),
    QueryFilter(
        "session_id",
        "Only the approvals of this session's runs.",
        _an_id("session_id", "session"),
        _ULID_SCHEMA,
    ),
    QueryFilter(
        "tool",
        "Only approvals of this tool (``shell.run``).",
        _an_identifier(TOOL_NAME),
        _TOOL_SCHEMA,
    ),
    QueryFilter(
        "principal",
        "Only approvals asked by runs acting for this principal (``user:alice``).",
        _an_identifier(PRINCIPAL),
        _PRINCIPAL_SCHEMA,
    ),
    QueryFilter(
        "decided_by",
        "Only approvals resolved by this principal.",
        _an_identifier(PRINCIPAL),
        _PRINCIPAL_SCHEMA,
    ),
)
"""``GET /v1/approvals``' filters (:class:`projections.ApprovalFilter`)."""

RUN_FILTERS: tuple[QueryFilter, ...] = (
    QueryFilter(
        "state",
        "Only runs in this state.",
        _one_of("state", tuple(RunStatus)),
        {"enum": list(RunStatus)},
    ),
    QueryFilter(
        "session_id", "Only this session's runs.", _an_id("session_id", "session"), _ULID_SCHEMA
    ),
    QueryFilter(
        "principal",
        "Only runs acting for this principal (``user:alice``).",
        _an_identifier(PRINCIPAL),
        _PRINCIPAL_SCHEMA,
    ),
)
"""``GET /v1/runs``' filters (:class:`projections.RunFilter`)."""

SESSION_FILTERS: tuple[QueryFilter, ...] = (
    QueryFilter(
        "principal",
        "Only sessions this principal created (``user:alice``).",
        _an_identifier(PRINCIPAL),
        _PRINCIPAL_SCHEMA,
    ),
)
"""``GET /v1/sessions``' filters (:class:`projections.SessionFilter`)."""

assert {f.name for f in APPROVAL_FILTERS} == set(ApprovalFilter.__struct_fields__)
assert {f.name for f in RUN_FILTERS} == set(RunFilter.__struct_fields__)
assert {f.name for f in SESSION_FILTERS} == set(SessionFilter.__struct_fields__)

ORDERS = ("oldest", "newest")
"""``?order=``: ``oldest`` first (the default) or ``newest`` first."""
SEARCH_MAX_CHARS = 200
"""The longest ``?q=`` a list takes."""


def query_reason(request: web.Request) -> str:
    """The optional ``reason`` query parameter of a delete: absent is "", present must say
    something, and at most `REASON_MAX_CHARS` characters (400 naming ``query.reason``)."""
    reason = request.query.get("reason", "")
    if "reason" in request.query and not reason.strip():
        raise ApiError("invalid_argument", "reason: empty (leave it out for none)", "query.reason")
    if len(reason) > REASON_MAX_CHARS:
        raise ApiError(
            "invalid_argument",
            f"reason: {len(reason):,} characters; the cap is {REASON_MAX_CHARS:,}",
            "query.reason",
        )
    return reason


def newest_first(request: web.Request) -> bool:
    """``?order=newest``: the list runs from the newest id down (``after`` then pages to older
    ones); ``oldest`` or absent: creation order."""
    raw = request.query.get("order")
    if raw is None:
        return False
    if raw not in ORDERS:
        raise ApiError(
            "invalid_argument", f"order must be one of {', '.join(ORDERS)}", "query.order"
        )
    return raw == ORDERS[1]


def search_text(request: web.Request) -> str | None:
    """``?q=``: the text a list's items must contain (:mod:`transports.http.listing`), casefolded;
    blank or over :data:`SEARCH_MAX_CHARS` characters is a 400 naming ``query.q``."""
    raw = request.query.get("q")
    if raw is None:
        return None
    if len(raw) > SEARCH_MAX_CHARS:
        raise ApiError(
            "invalid_argument", f"q must be at most {SEARCH_MAX_CHARS} characters", "query.q"
        )
    text = raw.strip()
    if not text:
        raise ApiError("invalid_argument", "q must not be blank", "query.q")
    return text.casefold()


F = TypeVar("F", bound=msgspec.Struct)


def query_filter(request: web.Request, kind: type[F], filters: tuple[QueryFilter, ...]) -> F:
    """``kind`` (a view's filter) from the request's filter parameters: each one present must
    pass its check (``?tool=`` is an error, not "any tool"); an absent one keeps any value."""
    values = {
        f.name: f.check(raw, f"query.{f.name}")
        for f in filters
        if (raw := request.query.get(f.name)) is not None
    }
    return kind(**values)
