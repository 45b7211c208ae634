"""Which shard each stream lives in: a session and all its streams together.

A session's streams (``session/...``, its runs', its tool calls', their approvals') live in
shard ``hash(session_id) mod S`` (SCALE-OUT.md, "Data"), so one node, the shard's owner, holds
all of a session's state, and per-shard recovery finds a run's streams where its session is.
Every other stream (tokens, schedules, tasks, learning, ...) lives in ``hash(stream) mod S``.

A stream's home is fixed by the append that creates it: placed by the ``home`` the append
names (the writers of a session's streams name its id: :class:`actors.stream.OwnedStream`),
else by its own name. Later appends need not name it: the writer remembers the home of the
streams it appended to lately and asks the database for the others (their ``stream_seq`` 0
row, one indexed query per batch). ``shard_append`` refuses an append that names a stream's
other shard (outcome ``misplaced``), so a wrong guess can never split a stream's rows over two
shard chains, whose locks would not order them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Protocol

REMEMBERED = 16_384
"""How many streams' homes the writer keeps (the most recently placed; a forgotten one costs
one indexed read the next time it is appended to)."""

Lookup = Callable[[list[str]], dict[str, int]]
"""The database's answer for streams it holds: stream -> the shard of its rows."""


class Placed(Protocol):
    """What placement reads of a queued append."""

    @property
    def stream(self) -> str: ...

    @property
    def expected_seq(self) -> int | None: ...

    @property
    def home(self) -> str | None:
        """What the stream is placed by if this append creates it (``None``: its name)."""


def shard_of(key: str, shards: int) -> int:
    """The shard of a placement key: the first 8 bytes of SHA-256 of it, mod ``shards``."""
    if shards == 1:
        return 0
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % shards


class StreamHomes:
    """The writer thread's memory of where streams live (not thread-safe: one writer)."""

    def __init__(self, shards: int, remembered: int = REMEMBERED) -> None:
        self.shards = shards
        self._remembered = remembered
        self._homes: dict[str, int] = {}

    def shards_of(
        self, requests: Sequence[Placed], lookup: Lookup, place: Callable[[str], int] | None = None
    ) -> list[int]:
        """Each request's shard, in order. Streams neither remembered nor new (``expected_seq``
        0) are looked up in one call; those the database does not hold are new, and go to their
        home's shard, or (no home) to ``place(stream)`` when given (a cluster node: a shard it
        owns), else their name's."""
        if self.shards == 1:
            return [0] * len(requests)
        homes = self._homes
        unknown = [r.stream for r in requests if r.stream not in homes and r.expected_seq != 0]
        found = lookup(sorted(set(unknown))) if unknown else {}
        shards: list[int] = []
        for request in requests:
            shard = homes.get(request.stream)
            if shard is None:
                shard = found.get(request.stream)
                if shard is None and request.home is None and place is not None:
                    shard = place(request.stream)
                if shard is None:
                    shard = shard_of(request.home or request.stream, self.shards)
                self.remember(request.stream, shard)
            shards.append(shard)
        return shards

    def remember(self, stream: str, shard: int) -> None:
        """``stream`` lives in ``shard`` (the oldest remembered home is forgotten past the
        bound)."""
        homes = self._homes
        if stream not in homes and len(homes) >= self._remembered:
            del homes[next(iter(homes))]
        homes[stream] = shard
