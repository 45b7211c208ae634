"""``GET /v1/runs/{id}/events``: a run's tape as Server-Sent Events, backlog then live.

Each entry is one event: ``id:`` its ``tape_seq``, ``event:`` its kind, ``data:`` the TapeEntry
JSON. The stream starts after the ``Last-Event-ID`` header (a reconnecting client) or the
``after`` query parameter (default -1), so a reconnect misses nothing and repeats nothing. It
sends what the tape view holds, then waits for the projector (``Projector.listen`` wakes an
asyncio event from the projector thread) and sends what it applied; it ends after the run's
terminal entry. A comment line every ``keepalive_s`` keeps proxies from timing the stream out.

A client that goes away costs nothing: the server runs with handler cancellation, so the
handler is cancelled at its next await and the ``finally`` unsubscribes from the projector.
"""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web

from projections import RawTapeEntry
from transports.http.context import CONTEXT
from transports.http.failures import ApiError
from transports.http.inputs import after_seq, path_id, seq_value
from transports.http.runs import run_record

TERMINAL_STATES = frozenset({"done", "failed", "cancelled"})
BATCH = 500
KEEPALIVE = b": keep-alive\n\n"

_encoder = msgspec.json.Encoder()
routes = web.RouteTableDef()


def frame(entry: RawTapeEntry) -> bytes:
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
async def run_events(request: web.Request) -> web.StreamResponse:
    ctx = request.app[CONTEXT]
    run_id = path_id(request, "run_id", "run")
    cursor = start_after(request)
    await run_record(ctx, run_id)  # 404 before the stream starts
    if ctx.closing.is_set():
        raise ApiError("unavailable", "the server is stopping")
    views = ctx.views
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def on_batch(_position: int) -> None:  # projector thread
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(wake.set)

    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache, no-store",
            "X-Accel-Buffering": "no",
        }
    )
    unsubscribe = ctx.runtime.projector.listen(on_batch)
    ctx.streams.add(wake)
    try:
        await response.prepare(request)
        while not ctx.closing.is_set():
            wake.clear()
            run = views.run(run_id)  # read before the tape: then the tape has all it did
            rows = views.tape_raw(run_id, after_seq=cursor, limit=BATCH)
            if rows:
                await response.write(b"".join(frame(entry) for entry in rows))
                cursor = rows[-1].tape_seq
                if len(rows) == BATCH:
                    continue
            if run is not None and run.state in TERMINAL_STATES:
                break
            try:
                await asyncio.wait_for(wake.wait(), ctx.keepalive_s)
            except TimeoutError:
                await response.write(KEEPALIVE)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left between two writes
    finally:
        ctx.streams.discard(wake)
        unsubscribe()
    return response
