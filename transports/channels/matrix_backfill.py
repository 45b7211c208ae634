"""What a Matrix room said that a sync did not show: the gap a ``limited`` timeline left (the
homeserver cut it short), or, when a saved cursor is refused, what came after the bot's own
last event. Read back from the room's history a page at a time (``/messages``), each page
retried through :class:`~transports.channels.matrix_answers.Retrying`, up to
:data:`BACKFILL_MAX` events; a failure or the limit is logged as a gap (messages may be
missing), never raised: the connector hands in what was found.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from nio import (  # type: ignore[import-untyped]  # matrix-nio ships no type information
    AsyncClient,
    MessageDirection,
    RoomMessagesResponse,
)

from actors.log_fields import fields
from transports.channels.connector import ConnectorError
from transports.channels.matrix_answers import Retrying, describe, source_of

log = logging.getLogger("reel.channels.matrix")  # the connector's one logger (matrix.py)

BACKFILL_MAX: Final = 1000
"""The most events one backfill recovers (more is logged as a gap)."""


async def backfill(
    client: AsyncClient,
    retrying: Retrying,
    room_id: str,
    prev_batch: str,
    since: str | None,
    *,
    user_id: str,
) -> list[dict[str, Any]]:
    """A room's events from ``prev_batch`` back, oldest first: to ``since`` (what a
    ``limited`` timeline left out), or with ``since`` None to the bot's (``user_id``'s) own
    last event (its last answer, or its join: see the connector's ``_catch_up``)."""
    start = prev_batch
    found: list[dict[str, Any]] = []

    async def page() -> Any:
        return await client.room_messages(
            room_id, start=start, end=since, direction=MessageDirection.back, limit=100
        )

    while len(found) < BACKFILL_MAX:
        response: Any
        try:
            response = await retrying("backfill", room_id, page)
        except ConnectorError as exc:
            response = exc
        if not isinstance(response, RoomMessagesResponse):
            log.warning(
                "matrix backfill failed: messages may be missing",
                extra=fields(channel=retrying.channel, room=room_id, error=describe(response)),
            )
            break
        chunk = [source_of(event) for event in response.chunk]
        own = [i for i, e in enumerate(chunk) if e.get("sender") == user_id]
        if since is None and own:
            found.extend(chunk[: own[0]])
            break
        found.extend(chunk)
        if not response.chunk or not response.end or response.end == start:
            break
        start = response.end
    else:
        log.warning(
            "matrix backfill stopped at its limit: older messages are skipped",
            extra=fields(channel=retrying.channel, room=room_id, limit=BACKFILL_MAX),
        )
    log.info(
        "matrix timeline backfilled",
        extra=fields(channel=retrying.channel, room=room_id, events=len(found)),
    )
    return list(reversed(found))
