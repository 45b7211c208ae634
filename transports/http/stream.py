"""``GET /v1/runs/{id}/events``: a run's tape as Server-Sent Events, backlog then live.

Each entry is one event: ``id:`` its ``tape_seq``, ``event:`` its kind, ``data:`` the TapeEntry
JSON. The stream starts after the ``Last-Event-ID`` header (a reconnecting client) or the
``after`` query parameter (default -1), so a reconnect misses nothing and repeats nothing. It
sends what the tape view holds, then follows it (:func:`projections.follow.follow_tape`, woken
by the server's one projector signal) and sends what the projector applied; it ends after the
run's terminal entry. A comment line every ``keepalive_s`` keeps proxies from timing the stream out.

A client that goes away costs nothing: the server runs with handler cancellation, so the
handler is cancelled at its next await and the ``finally`` unsubscribes from the projector.
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from projections import RawTapeRecord
from projections.follow import follow_tape
from transports.http.context import CONTEXT, permit
from transports.http.failures import ApiError
from transports.http.inputs import after_seq, path_id, seq_value
from transports.http.runs import run_record

KEEPALIVE = b": keep-alive\n\n"

_encoder = msgspec.json.Encoder()
routes = web.RouteTableDef()


def frame(entry: RawTapeRecord) -> bytes:
    """One SSE event for a tape entry (the JSON is one line: msgspec escapes newlines)."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (
        entry.tape_seq,
        entry.kind.encode(),
        _encoder.encode(entry),
    )


def start_after(request: web.Request) -> int:
    """Where the stream starts: after ``Last-Event-ID`` if sent, else after ``?after=``."""
    after = after_seq(request)  # checked even when the header wins
    header = request.headers.get("Last-Event-ID")
    if header is not None:
        return seq_value(header, "header.Last-Event-ID")
    return after


@routes.get("/v1/runs/{run_id}/events")
async def stream_run_events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    run_id = path_id(request, "run_id", "run")
    cursor = start_after(request)
    record = await run_record(ctx, run_id)  # 404 before the stream starts
    await permit(request, "run.read", ctx.authority.run_scope(record))
    if ctx.closing.is_set() or ctx.applied is None:
        raise ApiError("unavailable", "the server is stopping")
    loop = asyncio.get_running_loop()
    keepalive: asyncio.Future[None] = loop.create_future()

    def arm() -> None:
        nonlocal keepalive
        keepalive = loop.create_future()
        timer = keepalive

        def fire() -> None:
            if not timer.done():
                timer.set_result(None)

        loop.call_later(ctx.keepalive_s, fire)

    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache, no-store",
            "X-Accel-Buffering": "no",
        }
    )
    ctx.streams += 1
    try:
        await response.prepare(request)
        arm()
        pages = follow_tape(
            ctx.views, run_id, cursor, ctx.applied, ctx.views.tape_raw, wake=lambda: (keepalive,)
        )
        async for rows in pages:
            if ctx.closing.is_set():
                break
            if rows:
                await response.write(b"".join(frame(entry) for entry in rows))
            elif keepalive.done():
                await response.write(KEEPALIVE)
            if keepalive.done() or rows:
                keepalive.cancel()
                arm()
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left between two writes
    finally:
        keepalive.cancel()
        ctx.streams -= 1
    return response
