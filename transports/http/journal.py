"""``/v1/journal``: the head of the hash chain, the signed checkpoints, and a verification on
demand."""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from events import Checkpoint, WitnessStatus
from transports.http.bodies import JournalHead, VerifyRequest
from transports.http.context import CONTEXT, permit
from transports.http.inputs import LIST_CAP, after_seq, page_limit, read_body
from transports.http.replies import json_reply
from transports.journal_open import verify_own

routes = web.RouteTableDef()


class CheckpointRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One signed checkpoint (a ``journal.checkpoint`` row): docs/journal-format.md section 6;
    on a PostgreSQL journal a super-checkpoint (section 12)."""

    position: int
    """The last position it covers (the note's size; a super-checkpoint's: the rows its heads
    cover)."""
    hash: str
    """The hash of the row at ``position``, hex (a super-checkpoint's: SHA-256 of its heads)."""
    row_position: int
    """Where the checkpoint row stands (``position + 1`` on SQLite)."""
    previous: int
    """The row position of the checkpoint before it (0 for the first)."""
    origin: str
    signed_at_ms: int
    public_key: str
    """Raw Ed25519 public key, hex."""
    signature: str
    """Ed25519 over the note body, hex."""
    note: str
    """The C2SP signed note: append it, then an empty line, to a witness of your own."""

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> CheckpointRecord:
        return cls(
            position=checkpoint.position,
            hash=checkpoint.hash.hex(),
            row_position=checkpoint.row_position,
            previous=checkpoint.previous,
            origin=checkpoint.origin,
            signed_at_ms=checkpoint.signed_at_ms,
            public_key=checkpoint.public_key.hex(),
            signature=checkpoint.signature.hex(),
            note=checkpoint.note(),
        )


class CheckpointPage(msgspec.Struct, frozen=True, kw_only=True):
    """``GET /v1/journal/checkpoints``: what a monitor pulls to keep a witness of its own."""

    items: list[CheckpointRecord]
    limit: int
    limit_clamped: bool
    next_after: int | None
    """Pass as ``after`` for the next page (a ``position``); null when there is nothing more
    now."""
    origin: str | None
    """The log name the node signs under (null when it signs no checkpoints)."""
    witness: WitnessStatus | None
    """The node's own witness and how its appends went (null when none is configured)."""


@routes.get("/v1/journal/head")
async def get_journal_head(request: web.Request) -> web.Response:
    await permit(request, "journal.read")
    runtime = request.app[CONTEXT].runtime
    views_position = runtime.projector.position
    last = runtime.journal.head()
    return json_reply(
        JournalHead(position=last.position, hash=last.hash.hex(), views_position=views_position)
    )


@routes.get("/v1/journal/checkpoints")
async def list_journal_checkpoints(request: web.Request) -> web.Response:
    """The signed checkpoints with ``position > after``, oldest first."""
    await permit(request, "journal.read")
    journal = request.app[CONTEXT].runtime.journal
    after = after_seq(request)
    limit = page_limit(request, LIST_CAP)
    found = [c for c in journal.checkpoints() if c.position > after]
    page = found[: limit.value]
    key = journal.node_key
    return json_reply(
        CheckpointPage(
            items=[CheckpointRecord.of(c) for c in page],
            limit=limit.value,
            limit_clamped=limit.clamped,
            next_after=page[-1].position if len(found) > len(page) else None,
            origin=key.origin if key is not None else None,
            witness=journal.witness.status if journal.witness is not None else None,
        )
    )


@routes.post("/v1/journal/verify")
async def verify_journal(request: web.Request) -> web.Response:
    """Walk every row and every signed checkpoint against the node's own key and its witness.

    It reads every row, so it runs on a worker thread, one at a time; the report carries any
    fault (a broken journal is a 200 with ``ok: false``, not an HTTP error). The key is the
    node's own (``key_source: "node"``), never called pinned: it lives in the data dir, so only
    a witness anchors this report. An auditor who does not trust the node pins its key and runs
    ``reel journal verify --public-key`` on a copy instead."""
    ctx = request.app[CONTEXT]
    await read_body(request, VerifyRequest, optional=True)
    await permit(request, "journal.read")
    journal = ctx.runtime.journal
    async with ctx.verify_lock:
        report = await asyncio.to_thread(verify_own, journal)
    return json_reply(report)
