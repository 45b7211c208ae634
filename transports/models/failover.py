"""Failover between model endpoints: retries with jittered back-off, a circuit breaker per
endpoint, and the next endpoint within the same turn.

:class:`FailoverProvider` is a :class:`~actors.provider.ModelProvider` over an ordered list of
endpoints (``[[providers]]``, :mod:`transports.models.endpoints`). For each turn:

1. The endpoints are taken in list order; when some have a ``weight``, the first one is drawn
   among the available weighted ones in proportion, the others follow in list order.
2. An endpoint whose circuit is open is skipped without a request (:mod:`.circuit`). A
   half-open one gets this turn as its probe: one attempt.
3. Otherwise up to ``1 + max_retries`` attempts, ``backoff_base_s * 2**attempt`` apart scaled
   by a random factor in [0.5, 1] and capped at ``backoff_max_s`` (a ``Retry-After`` sets the
   minimum; one longer than ``backoff_max_s`` is not waited out: the turn fails over). A
   time-out is not retried on the same endpoint: it fails over at once.
4. Every failed attempt counts against the endpoint's breaker; a success resets it.
5. **Failover happens only before the turn's first item was passed on.** Once any text or call
   reached the run (and so may be on the tape), an error is the run's ``provider_error``: the
   turn is never streamed twice.
6. When no endpoint answered (each failed, or was skipped), the turn raises
   :class:`~actors.provider.ProviderUnavailable` naming each endpoint and why: the run fails
   ``provider_unavailable``. With every circuit open, that costs no request at all.

What counts against an endpoint: a retryable error (429, 5xx, a connection that failed or
broke, a malformed stream, a time-out) and 401/403/404 (its key or its URL is wrong). Any other
error is the request's own (a 400, the deterministic provider's ``/fail``): raised as it is,
neither failing over nor counting.

The answer's :class:`~actors.provider.Usage` names the endpoint (its ``label``) and the model
that answered (the server's, else the configured one); a turn whose endpoint reports no usage
gets a zero one carrying both, so ``run.turn_completed`` always records them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

import msgspec

from actors.log_fields import fields
from actors.provider import (
    ChatMessage,
    ModelProvider,
    ProviderError,
    ProviderEvent,
    ProviderRequest,
    ProviderTimeout,
    ProviderUnavailable,
    TurnEnd,
    Usage,
)
from transports.models.circuit import Breaker, CircuitState
from transports.models.endpoints import EndpointConfig, Secrets, make_endpoint

__all__ = ["Endpoint", "EndpointStatus", "FailoverProvider", "ProbeResult"]

_log = logging.getLogger("reel.provider")
_circuit_log = logging.getLogger("reel.provider.circuit")

ENDPOINT_STATUSES = frozenset({401, 403, 404})
"""Non-retryable statuses that are the endpoint's fault (its key, its URL), not the request's."""
PROBE_REQUEST = ProviderRequest(
    messages=(ChatMessage(role="user", content="Reply with the word OK."),), max_tokens=8
)
"""What ``reel providers test`` sends each endpoint."""


class EndpointStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One endpoint as ``/v1/providers`` and ``/metrics`` show it."""

    name: str
    kind: str
    model: str
    state: CircuitState
    consecutive_failures: int
    retry_in_s: float
    """Seconds until an open circuit lets a probe through (0 unless open)."""
    successes: int
    failures: int


class ProbeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``reel providers test`` request found."""

    name: str
    kind: str
    ok: bool
    latency_ms: float
    model: str
    """The model that answered (the server's name for it), else the configured one."""
    error: str | None = None
    state: CircuitState = "closed"


def _fault_of_endpoint(error: ProviderError) -> bool:
    return error.retryable or error.status in ENDPOINT_STATUSES


class Endpoint:
    """A configured endpoint, its breaker and counters, and its provider (made on first use,
    when its key is read)."""

    def __init__(
        self,
        config: EndpointConfig,
        secrets: Secrets | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.name = config.label
        self.breaker = Breaker(config.failure_threshold, config.cooldown_s, clock)
        self.successes = 0
        self.failures = 0
        self._secrets = secrets
        self._provider: ModelProvider | None = None

    def provider(self) -> ModelProvider:
        if self._provider is None:
            self._provider = make_endpoint(self.config, self._secrets)
        return self._provider

    def status(self) -> EndpointStatus:
        state = self.breaker.state
        return EndpointStatus(
            name=self.name,
            kind=self.config.kind,
            model=self.config.model,
            state=state,
            consecutive_failures=self.breaker.failures,
            retry_in_s=round(self.breaker.retry_in_s(), 3) if state == "open" else 0.0,
            successes=self.successes,
            failures=self.failures,
        )

    async def aclose(self) -> None:
        provider, self._provider = self._provider, None
        if provider is not None:
            await provider.aclose()


class FailoverProvider:
    """A :class:`~actors.provider.ModelProvider` over endpoints; see the module docstring."""

    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        secrets: Secrets | None = None,
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if not endpoints:
            raise ValueError("providers: at least one endpoint")
        self.endpoints = [Endpoint(e, secrets, clock) for e in endpoints]
        kinds = {e.kind for e in endpoints}
        self.name: str = kinds.pop() if len(kinds) == 1 else "failover"
        """The kind when every endpoint is of one (``deterministic`` keeps its extractive
        compaction and rules-based learning), else ``failover``."""
        self._rng = rng or random.Random()
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"FailoverProvider({', '.join(e.name for e in self.endpoints)})"

    def statuses(self) -> list[EndpointStatus]:
        return [e.status() for e in self.endpoints]

    async def aclose(self) -> None:
        for endpoint in self.endpoints:
            with contextlib.suppress(Exception):
                await endpoint.aclose()

    def _order(self) -> list[Endpoint]:
        weighted = [e for e in self.endpoints if e.config.weight > 0 and e.breaker.state != "open"]
        if not weighted:
            return list(self.endpoints)
        first = self._rng.choices(weighted, weights=[e.config.weight for e in weighted])[0]
        return [first, *(e for e in self.endpoints if e is not first)]

    def _backoff_s(self, endpoint: Endpoint, attempt: int) -> float:
        cfg = endpoint.config
        delay = cfg.backoff_base_s * float(2**attempt) * self._rng.uniform(0.5, 1.0)
        return min(delay, cfg.backoff_max_s)

    def _failed(self, endpoint: Endpoint, error: ProviderError) -> None:
        endpoint.failures += 1
        if endpoint.breaker.failure() == "open":
            cooldown = endpoint.breaker.cooldown_s
            _circuit_log.warning(
                "provider endpoint %s: circuit open after %d consecutive failures (%s); no "
                "request for %g s",
                endpoint.name,
                endpoint.breaker.failures,
                error.message,
                cooldown,
                extra=fields(
                    endpoint=endpoint.name,
                    circuit="open",
                    consecutive_failures=endpoint.breaker.failures,
                    cooldown_s=cooldown,
                    status=error.status,
                ),
            )

    def _succeeded(self, endpoint: Endpoint) -> None:
        endpoint.successes += 1
        if endpoint.breaker.success() == "closed":
            _circuit_log.info(
                "provider endpoint %s: circuit closed (the probe succeeded)",
                endpoint.name,
                extra=fields(endpoint=endpoint.name, circuit="closed"),
            )

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        """Stream the turn from the first endpoint that answers; see the module docstring."""
        why: list[str] = []
        for endpoint in self._order():
            verdict = endpoint.breaker.acquire()
            if verdict == "skip":
                wait = endpoint.breaker.retry_in_s()
                why.append(f"{endpoint.name}: circuit open (next probe in {wait:.0f} s)")
                continue
            if verdict == "probe":
                _circuit_log.info(
                    "provider endpoint %s: circuit half-open, probing",
                    endpoint.name,
                    extra=fields(endpoint=endpoint.name, circuit="half_open"),
                )
            attempts = 1 if verdict == "probe" else endpoint.config.max_retries + 1
            passed_on = False
            settled = False
            try:
                for attempt in range(attempts):
                    try:
                        async for event in self._attempt(endpoint, request):
                            passed_on = True
                            yield event
                    except ProviderError as error:
                        fault = _fault_of_endpoint(error)
                        if fault:
                            self._failed(endpoint, error)
                            settled = True
                        if passed_on or not fault:
                            raise  # never a second stream of a turn; the request's own fault
                        delay = self._retry_delay(endpoint, error, attempt, attempts)
                        if delay is None:
                            why.append(f"{endpoint.name}: {error.message}")
                            break
                        _log.warning(
                            "provider %s: %s; retry %d of %d in %.2f s",
                            endpoint.name,
                            error.message,
                            attempt + 1,
                            endpoint.config.max_retries,
                            delay,
                            extra=fields(
                                provider=endpoint.name,
                                status=error.status,
                                retry=attempt + 1,
                                max_retries=endpoint.config.max_retries,
                                delay_s=round(delay, 3),
                            ),
                        )
                        await self._sleep(delay)
                        if endpoint.breaker.state != "closed":  # another turn opened it
                            why.append(f"{endpoint.name}: {error.message}")
                            break
                        continue
                    self._succeeded(endpoint)
                    settled = True
                    return
            finally:
                if verdict == "probe" and not settled:
                    endpoint.breaker.release()
        raise ProviderUnavailable("no provider endpoint could answer: " + "; ".join(why))

    def _retry_delay(
        self, endpoint: Endpoint, error: ProviderError, attempt: int, attempts: int
    ) -> float | None:
        """How long to wait before the next attempt on ``endpoint``, or None to fail over:
        the last attempt, an open circuit, a time-out, an error no retry mends (401), or a
        ``Retry-After`` longer than ``backoff_max_s``."""
        if attempt + 1 >= attempts or endpoint.breaker.state != "closed":
            return None
        if isinstance(error, ProviderTimeout) or not error.retryable:
            return None
        delay = self._backoff_s(endpoint, attempt)
        if error.retry_after_s is not None:
            if error.retry_after_s > endpoint.config.backoff_max_s:
                return None
            delay = max(delay, error.retry_after_s)
        return delay

    async def _attempt(
        self, endpoint: Endpoint, request: ProviderRequest
    ) -> AsyncGenerator[ProviderEvent, None]:
        """One attempt's events, the usage naming the endpoint and the model."""
        configured = endpoint.config.model or endpoint.config.kind
        provider = endpoint.provider()
        usage_seen = False
        async with contextlib.aclosing(provider.stream(request)) as events:
            async for event in events:
                if isinstance(event, Usage):
                    usage_seen = True
                    event = msgspec.structs.replace(
                        event, endpoint=endpoint.name, model=event.model or configured
                    )
                elif isinstance(event, TurnEnd) and not usage_seen:
                    yield Usage(
                        prompt_tokens=0,
                        completion_tokens=0,
                        model=configured,
                        endpoint=endpoint.name,
                    )
                yield event

    async def probe(self, endpoint: Endpoint) -> ProbeResult:
        """One tiny request to ``endpoint`` alone (``reel providers test``): no retry, no
        failover, and its circuit is left as it is."""
        started = time.perf_counter()
        model = endpoint.config.model or endpoint.config.kind
        error: str | None = None
        try:
            async for event in self._attempt(endpoint, PROBE_REQUEST):
                if isinstance(event, Usage):
                    model = event.model
        except ProviderError as exc:
            error = exc.message
        return ProbeResult(
            name=endpoint.name,
            kind=endpoint.config.kind,
            ok=error is None,
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
            model=model,
            error=error,
            state=endpoint.breaker.state,
        )
