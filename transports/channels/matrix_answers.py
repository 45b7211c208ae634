"""How the Matrix connector reads what the homeserver answered, and how long it waits: the
failures it tells apart (refused credentials, a refused saved cursor, a rate limit, anything
worth retrying, a lost connection), the backoff between attempts, and secret-free descriptions
for the log. nio returns error answers instead of raising, and raises on lost connections
without retrying; the connector turns both into these.

A send, join, leave or backfill page goes through :class:`Retrying`: 429s and lost connections
are waited out in the calling task only (so other rooms and the sync loop go on), each wait a
warning line and counted, until :data:`GIVE_UP_S` (then a :class:`ConnectorError`)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import aiohttp
from nio import ErrorResponse  # type: ignore[import-untyped]  # matrix-nio ships no types

from actors.log_fields import fields
from transports.channels.connector import ConnectorError

log = logging.getLogger("reel.channels.matrix")  # the connector's one logger (matrix.py)
R = TypeVar("R")

GIVE_UP_S: Final = 300.0
"""A send, join or leave retries 429s and lost connections this long, then fails."""
BACKOFF_FIRST_S: Final = 0.5
BACKOFF_MAX_S: Final = 30.0
RETRY_AFTER_DEFAULT_MS: Final = 5000
"""A 429 without ``retry_after_ms`` waits this long."""
LOST: Final = (aiohttp.ClientError, OSError, TimeoutError)
"""What a request raises when the homeserver cannot be reached (nio raises, never retries)."""


class Refused(Exception):
    """The homeserver refused the credentials (a 4xx answer to a login or whoami)."""


class Unavailable(Exception):
    """The homeserver answered with an error worth retrying (5xx, a malformed answer)."""


class CursorRefused(Exception):
    """The homeserver refused the saved sync token (a 4xx other than 429 or a bad access
    token, to a sync from a resumed cursor): it will never be accepted."""


class RateLimited(Exception):
    """The homeserver answered 429: wait ``after_s``, then ask again."""

    def __init__(self, after_s: float) -> None:
        super().__init__(f"rate limited for {after_s:.1f}s")
        self.after_s = after_s


def retry_after_s(response: object) -> float | None:
    """How long a rate-limited answer (HTTP 429 / ``M_LIMIT_EXCEEDED``) says to wait; None for
    any other answer."""
    if not isinstance(response, ErrorResponse):
        return None
    status = getattr(getattr(response, "transport_response", None), "status", None)
    if status != 429 and response.status_code != "M_LIMIT_EXCEEDED":
        return None
    return (response.retry_after_ms or RETRY_AFTER_DEFAULT_MS) / 1000


def http_status(response: object) -> int | None:
    status = getattr(getattr(response, "transport_response", None), "status", None)
    return status if isinstance(status, int) else None


def backoff_s(failures: int) -> float:
    """The wait after ``failures`` failures in a row: doubling from :data:`BACKOFF_FIRST_S` to
    :data:`BACKOFF_MAX_S`, with 20% jitter so many clients do not reconnect in step."""
    base: float = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** max(0, failures - 1))
    return base * random.uniform(0.8, 1.0)


def source_of(event: object) -> dict[str, Any]:
    """The raw event nio parsed (its ``source``), whatever class nio chose for it. Some of
    nio's classes pop ``content`` out of the source (invite events): it is put back from the
    parsed event."""
    source = getattr(event, "source", None)
    if not isinstance(source, dict):
        return {}
    content = getattr(event, "content", None)
    if "content" not in source and isinstance(content, dict):
        return {**source, "content": content}
    return source


def describe(thing: object) -> str:
    """A short, secret-free description of a failed answer or exception: the homeserver's
    error code and message, or the exception's class (an exception's text may hold a URL)."""
    if isinstance(thing, ErrorResponse):
        code = thing.status_code or f"HTTP {http_status(thing) or '?'}"
        return f"{code}: {thing.message}"[:200] if thing.message else code
    if isinstance(thing, Refused | Unavailable | RateLimited | ConnectorError):
        return str(thing)[:200]
    return type(thing).__name__


class Retrying:
    """A channel's requests, each retried through 429s and lost connections (see the module's
    docstring). ``running`` says whether the connector still has its client: a request of a
    stopped connector fails at once."""

    def __init__(self, channel: str, running: Callable[[], bool]) -> None:
        self.channel = channel
        self.running = running
        self.rate_limited = 0
        """429 answers met since the node started (each waited out, then retried)."""

    async def __call__(self, request: str, room_id: str, call: Callable[[], Awaitable[R]]) -> R:
        """``call()`` until it is neither rate-limited nor lost, for up to :data:`GIVE_UP_S`;
        then :class:`ConnectorError`. Each wait is a warning line (and a counter)."""
        started = time.monotonic()
        failures = 0
        while True:
            if not self.running():
                raise ConnectorError(f"{request}: the matrix connector stopped")
            try:
                response = await call()
            except LOST as exc:
                failures += 1
                wait = backoff_s(failures)
                problem = f"the homeserver is unreachable ({describe(exc)})"
            else:
                after = retry_after_s(response)
                if after is None:
                    return response
                self.rate_limited += 1
                wait = after
                problem = f"rate-limited by the homeserver (429, retry after {after:.1f}s)"
            if time.monotonic() - started + wait > GIVE_UP_S:
                raise ConnectorError(f"{request}: {problem}; gave up after {GIVE_UP_S:.0f}s")
            self.delayed(request, room_id, problem, wait)
            await asyncio.sleep(wait)

    def delayed(self, request: str, room_id: str, problem: str, wait: float) -> None:
        """Say that ``request`` waits ``wait`` seconds, and why."""
        log.warning(
            "matrix request delayed",
            extra=fields(
                channel=self.channel,
                request=request,
                room=room_id,
                problem=problem,
                retry_in_s=round(wait, 2),
            ),
        )
