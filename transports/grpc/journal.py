"""``reel.v1.Journal``: Head, Verify and Read, for auditors on another machine.

Read sends the rows exactly as stored (payload bytes, ``prev_hash``, ``hash``) so the client can
recompute the chain itself (docs/journal-format.md); Head carries the latest signed checkpoint so
it can also check the node's signature. Verification and reads run on worker threads: a long
verify never stalls the node's I/O loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from events import StoredEvent
from projections.follow import pages
from proto.reel.v1 import (
    Envelope,
    JournalBase,
    JournalHead,
    JournalHeadRequest,
    ReadJournalRequest,
    VerifyJournalRequest,
    VerifyJournalResponse,
)
from transports.grpc.context import ServiceContext
from transports.grpc.records import checkpoint_message, envelope_message, verify_message
from transports.grpc.status import beyond_head, invalid
from transports.journal_open import verify_own

READ_BATCH = 1000


class JournalService(JournalBase):
    """Read-only access to the node's journal."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def head(self, message: JournalHeadRequest) -> JournalHead:
        await self.ctx.permit("journal.read")
        journal = self.ctx.runtime.journal
        head = await asyncio.to_thread(journal.head)
        checkpoints = await asyncio.to_thread(journal.checkpoints)
        return JournalHead(
            position=head.position,
            hash=head.hash,
            last_checkpoint=checkpoint_message(checkpoints[-1]) if checkpoints else None,
        )

    async def verify(self, message: VerifyJournalRequest) -> VerifyJournalResponse:
        await self.ctx.permit("journal.read")
        journal = self.ctx.runtime.journal
        report = await asyncio.to_thread(verify_own, journal)
        return verify_message(report)

    async def read(self, message: ReadJournalRequest) -> AsyncIterator[Envelope]:
        await self.ctx.permit("journal.read")
        if message.after_position < 0:
            raise invalid("after_position", "must not be negative")
        if message.limit < 0:
            raise invalid("limit", "must not be negative (0 means no limit)")
        ctx = self.ctx
        journal = ctx.runtime.journal
        beyond_head(message.after_position, journal.committed_position)
        left = message.limit or None
        asked = 0

        def read(after: int, limit: int) -> list[StoredEvent]:
            nonlocal asked
            # On the loop thread: an indexed read of committed rows takes a millisecond, and a
            # worker thread per read made 500 followers queue behind each other for seconds.
            want = asked = limit if left is None else min(limit, left)
            return journal.read(after, want)

        def wake() -> tuple[asyncio.Future[None]]:
            return (ctx.shutdown,)

        position = message.after_position
        async with ctx.stream():
            async for rows in pages(read, position, _position, ctx.committed, READ_BATCH, wake):
                for stored in rows:
                    yield envelope_message(stored)
                    position = stored.position
                if left is not None:
                    left -= len(rows)
                    if left <= 0:
                        return
                if not message.follow and len(rows) < asked:
                    return  # all there is, for now
                if ctx.shutdown.done():
                    raise ctx.closing_error(f"read again with after_position {position}")


def _position(stored: StoredEvent) -> int:
    return stored.position
