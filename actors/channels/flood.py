"""What a channel remembers of its senders for flood control: each sender's rate bucket (the
router's :func:`~actors.channels.router.take` decides with it), and when a flooding
sender's last ``rate_limited`` refusal was recorded, with the refusals counted since: such
refusals are recorded at most once per :data:`FLOOD_RECORD_EVERY_MS` (the next recorded one
says how many it stands for), so a flood does not flood the journal. At most
:data:`BUCKETS_KEPT` senders are remembered for each (least recently seen forgotten first), so
made-up sender ids cannot grow it without bound. Nothing here reads a clock: the channel's
actor passes ``now``.
"""

from __future__ import annotations

from typing import Final

from actors.channels.router import Bucket

FLOOD_RECORD_EVERY_MS: Final = 1000
"""A flooding sender's refusals are recorded at most once a second (the rest are counted)."""
BUCKETS_KEPT: Final = 10_000
"""Senders whose rate buckets are remembered (least recently seen forgotten first)."""


class Senders:
    """One channel's senders, as flood control remembers them (see the module's docstring)."""

    def __init__(self) -> None:
        self.buckets: dict[str, Bucket] = {}
        self.flood: dict[str, tuple[int, int]] = {}
        """Sender -> (when its last rate_limited refusal was recorded, refusals since)."""

    def took(self, principal: str, bucket: Bucket) -> None:
        """Keep ``principal``'s bucket as its last message left it."""
        self.buckets.pop(principal, None)
        self.buckets[principal] = bucket
        if len(self.buckets) > BUCKETS_KEPT:
            self.buckets.pop(next(iter(self.buckets)))

    def rate_limited(self, principal: str, now: int) -> int | None:
        """A ``rate_limited`` refusal of ``principal`` at ``now``: None when it is only counted
        (one was recorded less than :data:`FLOOD_RECORD_EVERY_MS` ago), else the refusals
        counted since the last recorded one (this one is recorded, saying so)."""
        last, count = self.flood.get(principal, (0, 0))
        if now - last < FLOOD_RECORD_EVERY_MS:
            self.flood[principal] = (last, count + 1)
            return None
        self.flood[principal] = (now, 0)
        if len(self.flood) > BUCKETS_KEPT:
            self.flood.pop(next(iter(self.flood)))
        return count
