"""``/v1/learning/candidates``: what post-run reflection learned, and its review.

- ``GET /v1/learning/candidates`` (``learning.list``, then ``learning.read`` per item):
  candidates in the order they were proposed, narrowed by ``status``, ``kind``, ``principal``.
- ``GET /v1/learning/candidates/{id}`` (``learning.read``).
- ``POST /v1/learning/candidates/{id}/accept|reject|rollback`` (``learning.review``, with the
  candidate's kind, the principal it concerns, its status and the decision in the context):
  accept applies it (a fact becomes a memory item), reject refuses a pending one, rollback
  withdraws an applied one (its memory item is deleted). The state is read from the
  candidate's own stream, not the view, so a review never acts on a stale status: accepting
  an applied candidate, rejecting an applied one (roll it back instead) or rolling back one
  that is not applied is a 409 saying so.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

import msgspec
from aiohttp import web

from actors.learning.desk import LearningDesk
from actors.learning.state import CandidateState
from events.catalog import CANDIDATE_STATUSES, LEARNING_KINDS
from events.fields import PRINCIPAL, REASON_MAX_CHARS
from projections import CandidateFilter, CandidateRecord, LearningView
from transports.access.authority import Scope
from transports.http.context import CONTEXT, ApiContext, permit
from transports.http.failures import ApiError
from transports.http.inputs import (
    LIST_CAP,
    QueryFilter,
    after_id,
    identifier,
    page_limit,
    path_id,
    query_filter,
    read_body,
)
from transports.http.replies import json_reply

routes = web.RouteTableDef()

Decision = Literal["accept", "reject", "rollback"]


class CandidatePage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/learning/candidates``: a page of candidates."""

    items: list[CandidateRecord]
    limit: int
    limit_clamped: bool
    next_after: str | None
    """Pass as ``after`` for the next page (null: this is the last)."""


class ReviewRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The body of a review (optional): why, recorded on the event."""

    reason: Annotated[str, msgspec.Meta(max_length=REASON_MAX_CHARS)] = ""


def _one_of(name: str, values: tuple[str, ...]) -> QueryFilter:
    def check(raw: str, field: str) -> str:
        if raw not in values:
            raise ApiError("invalid_argument", f"{name} must be one of {', '.join(values)}", field)
        return raw

    return QueryFilter(name, f"Only candidates of this {name}.", check, {"enum": list(values)})


def _principal(raw: str, field: str) -> str:
    identifier(raw, field, PRINCIPAL)
    return raw


CANDIDATE_FILTERS: tuple[QueryFilter, ...] = (
    _one_of("status", CANDIDATE_STATUSES),
    _one_of("kind", LEARNING_KINDS),
    QueryFilter(
        "principal",
        "Only candidates about this principal (``user:alice``).",
        _principal,
        {"type": "string", "pattern": f"^{PRINCIPAL.pattern.pattern}$"},
    ),
)
"""``GET /v1/learning/candidates``' filters (:class:`projections.CandidateFilter`)."""

assert {f.name for f in CANDIDATE_FILTERS} == set(CandidateFilter.__struct_fields__)


def learning_scope(candidate: CandidateRecord | CandidateState, decision: str = "") -> Scope:
    """The resource and context of a ``learning.read`` / ``learning.review`` decision."""
    return candidate.candidate_id, {
        "candidate_id": candidate.candidate_id,
        "kind": candidate.kind,
        "concerns": candidate.principal,
        "status": candidate.status,
        "decision": decision,
    }


def _view(ctx: ApiContext) -> LearningView:
    return ctx.runtime.learning.view


def _desk(ctx: ApiContext) -> LearningDesk:
    return ctx.runtime.learning.desk


@routes.get("/v1/learning/candidates")
async def list_candidates(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    where = query_filter(request, CandidateFilter, CANDIDATE_FILTERS)
    after = after_id(request)
    limit = page_limit(request, LIST_CAP)
    who = await permit(request, "learning.list")
    rows = _view(ctx).candidates(where, after, limit.value + 1)
    more = len(rows) > limit.value
    items = rows[: limit.value]
    return json_reply(
        CandidatePage(
            items=ctx.readable(who, "learning.read", items, learning_scope),
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=items[-1].candidate_id if more else None,
        )
    )


@routes.get("/v1/learning/candidates/{candidate_id}")
async def get_candidate(request: web.Request) -> web.Response:
    ctx = request.app[CONTEXT]
    record = await _record(ctx, path_id(request, "candidate_id", "learning candidate"))
    await permit(request, "learning.read", learning_scope(record))
    return json_reply(record)


@routes.post("/v1/learning/candidates/{candidate_id}/accept")
async def accept_candidate(request: web.Request) -> web.Response:
    return await _review(request, "accept")


@routes.post("/v1/learning/candidates/{candidate_id}/reject")
async def reject_candidate(request: web.Request) -> web.Response:
    return await _review(request, "reject")


@routes.post("/v1/learning/candidates/{candidate_id}/rollback")
async def rollback_candidate(request: web.Request) -> web.Response:
    return await _review(request, "rollback")


async def _review(request: web.Request, decision: Decision) -> web.Response:
    ctx = request.app[CONTEXT]
    candidate_id = path_id(request, "candidate_id", "learning candidate")
    body = await read_body(request, ReviewRequest, optional=True)
    desk = _desk(ctx)
    state = await asyncio.to_thread(desk.state, candidate_id)
    if state is None:
        raise ApiError("not_found", f"no learning candidate with id {candidate_id!r}")
    who = await permit(request, "learning.review", learning_scope(state, decision))
    act = {"accept": desk.accept, "reject": desk.reject, "rollback": desk.rollback}[decision]
    await asyncio.to_thread(act, candidate_id, by=who.principal, reason=body.reason)
    await ctx.caught_up()
    return json_reply(await _record(ctx, candidate_id))


async def _record(ctx: ApiContext, candidate_id: str) -> CandidateRecord:
    view = _view(ctx)
    record = await ctx.fresh(lambda: view.candidate(candidate_id))
    if record is None:
        raise ApiError("not_found", f"no learning candidate with id {candidate_id!r}")
    return record
