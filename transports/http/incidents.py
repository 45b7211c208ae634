"""``GET /v1/incidents``: what the watchdog found, open or resolved (docs/operations.md,
"Watchdog"). One Cedar action, ``incident.read``: incidents are node-wide, so whoever may read
them reads them all."""

from __future__ import annotations

import msgspec
from aiohttp import web

from events.catalog import INCIDENT_DOMAINS
from projections import INCIDENT_STATES, IncidentFilter, IncidentRecord
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    LIST_CAP,
    Check,
    QueryFilter,
    after_id,
    page_limit,
    query_filter,
)
from transports.http.replies import json_reply

routes = web.RouteTableDef()


class IncidentPage(msgspec.Struct, frozen=True, kw_only=True):
    """A page of incidents in opening order; ``next_after`` is the cursor of the next page
    (null on the last)."""

    items: list[IncidentRecord]
    limit: int
    limit_clamped: bool
    next_after: str | None


def _one_of(name: str, values: tuple[str, ...]) -> Check:
    def check(raw: str, field: str) -> str:
        if raw not in values:
            raise ApiError("invalid_argument", f"{name} must be one of {', '.join(values)}", field)
        return raw

    return check


INCIDENT_FILTERS: tuple[QueryFilter, ...] = (
    QueryFilter(
        "state",
        "Only open (or only resolved) incidents.",
        _one_of("state", INCIDENT_STATES),
        {"enum": list(INCIDENT_STATES)},
    ),
    QueryFilter(
        "domain",
        "Only incidents of this domain.",
        _one_of("domain", INCIDENT_DOMAINS),
        {"enum": list(INCIDENT_DOMAINS)},
    ),
)
"""``GET /v1/incidents``' filters (:class:`projections.IncidentFilter`)."""

assert {f.name for f in INCIDENT_FILTERS} == set(IncidentFilter.__struct_fields__)


@routes.get("/v1/incidents")
async def list_incidents(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    where = query_filter(request, IncidentFilter, INCIDENT_FILTERS)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    await permit(request, "incident.read")
    rows = ctx.runtime.incidents.incidents(where, after, limit.value + 1)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    return json_reply(
        IncidentPage(
            items=items,
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].incident_id if more else None,
        )
    )
