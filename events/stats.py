"""Append latency, measured by the writer from submit to commit (for ``/metrics``)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

import msgspec

BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Upper bounds (seconds) of the histogram's buckets; +Inf is implied."""


class LatencySnapshot(msgspec.Struct, frozen=True):
    """Cumulative counts per bucket (Prometheus style), the sum of seconds and the count."""

    buckets: tuple[tuple[float, int], ...]
    sum_s: float
    count: int


class LatencyHistogram:
    """A thread-safe fixed-bucket histogram."""

    def __init__(self, bounds: tuple[float, ...] = BUCKETS_S) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Record one latency (a commit of one append: the journal's usual case)."""
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
            self._sum += seconds
            self._count += 1

    def observe_many(self, seconds: Sequence[float]) -> None:
        """Record each of ``seconds`` (one lock for all: the journal records a commit's
        appends together)."""
        bounds = self.bounds
        with self._lock:
            counts = self._counts
            for s in seconds:
                counts[bisect.bisect_left(bounds, s)] += 1
                self._sum += s
            self._count += len(seconds)

    def snapshot(self) -> LatencySnapshot:
        with self._lock:
            counts = list(self._counts)
            total, n = self._sum, self._count
        cumulative = []
        running = 0
        for bound, c in zip((*self.bounds, float("inf")), counts, strict=True):
            running += c
            cumulative.append((bound, running))
        return LatencySnapshot(tuple(cumulative), total, n)
