"""A circuit breaker for one model endpoint: stop sending to an endpoint that keeps failing.

States (:data:`CircuitState`):

- ``closed``: requests go through; each failure counts, a success resets the count. The
  ``threshold``-th consecutive failure opens the circuit.
- ``open``: no request is sent (the caller fails over at once) until ``cooldown_s`` passed
  since it opened.
- ``half_open``: the cool-down is over; the next request is the one probe (one attempt, no
  retries), and other requests skip the endpoint while it is in flight. Its success closes the
  circuit, its failure opens it again for another cool-down. A probe that ends without a
  verdict (the run was cancelled, the request was refused for its own content) frees the slot.

Pure bookkeeping with an injected clock; thread-safe (the I/O loop changes it, ``/metrics``
reads it from the HTTP thread). Callers log the transitions :meth:`Breaker.failure` and
:meth:`Breaker.success` return.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["CIRCUIT_STATES", "Breaker", "CircuitState"]

CircuitState = Literal["closed", "open", "half_open"]
CIRCUIT_STATES: tuple[CircuitState, ...] = ("closed", "open", "half_open")


class Breaker:
    """One endpoint's circuit; see the module docstring."""

    def __init__(
        self,
        threshold: int,
        cooldown_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1:
            raise ValueError(f"failure_threshold: must be 1 or more, got {threshold}")
        if cooldown_s < 0:
            raise ValueError(f"cooldown_s: must be 0 or more, got {cooldown_s}")
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._opened_at: float | None = None
        self._probing = False
        self.failures = 0
        """Consecutive failures (since the last success)."""

    @property
    def state(self) -> CircuitState:
        with self._lock:
            return self._state()

    def _state(self) -> CircuitState:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self.cooldown_s:
            return "half_open"
        return "open"

    def retry_in_s(self) -> float:
        """Seconds until an open circuit lets a probe through (0 when it would now)."""
        with self._lock:
            if self._opened_at is None:
                return 0.0
            return max(0.0, self._opened_at + self.cooldown_s - self._clock())

    def acquire(self) -> Literal["go", "probe", "skip"]:
        """Whether a request may go now: ``go`` (closed), ``probe`` (this request is the
        half-open probe: one attempt), ``skip`` (open, or a probe is in flight)."""
        with self._lock:
            state = self._state()
            if state == "closed":
                return "go"
            if state == "half_open" and not self._probing:
                self._probing = True
                return "probe"
            return "skip"

    def release(self) -> None:
        """A probe ended with no verdict: the next request may probe."""
        with self._lock:
            self._probing = False

    def success(self) -> CircuitState | None:
        """A request succeeded: the count resets, the circuit closes. Returns ``closed`` when
        that changed the state, else None."""
        with self._lock:
            was = self._state()
            self.failures = 0
            self._opened_at = None
            self._probing = False
            return "closed" if was != "closed" else None

    def failure(self) -> CircuitState | None:
        """A request failed. Returns ``open`` when this opened the circuit (the threshold
        reached, or the probe failed), else None."""
        with self._lock:
            self.failures += 1
            probing, self._probing = self._probing, False
            if probing or (self._opened_at is None and self.failures >= self.threshold):
                self._opened_at = self._clock()
                return "open"
            return None
