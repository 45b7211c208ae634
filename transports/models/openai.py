"""OpenAI-compatible chat completions over aiohttp: streaming, tool calls, usage, retries.

Works with any server that speaks ``POST {base_url}/chat/completions``, streamed or whole
(OpenAI, llama.cpp's server, llama-cpp-python's, vLLM, Ollama's OpenAI endpoint, ...; how each
differs is the "Known server differences" table of docs/providers.md).

Failure handling, in one place:

- HTTP 429 and 5xx, and failures to connect, are retried up to ``max_retries`` times with
  exponential back-off and jitter (``backoff_base_s * 2**attempt``, scaled by a random factor
  in [0.5, 1], capped at ``backoff_max_s``). A ``Retry-After`` (or ``retry-after-ms``) header
  sets the minimum wait; one longer than ``backoff_max_s`` is not waited out: the error is
  raised at once, marked retryable, for the caller to schedule.
- A connection lost mid-stream is retried only while nothing has been yielded, so a consumer
  never sees a turn's output twice.
- Other 4xx statuses fail at once with the server's own explanation
  (``provider returned 401: invalid api key``).
- ``timeout_s`` bounds connecting, waiting for the response headers, and each gap between
  stream chunks; ``stream_timeout_s`` bounds the whole request. Either raises
  :class:`~actors.provider.ProviderTimeout`. A time-out after connecting is not retried: a
  server that is slow now is likely slow on the next try as well, and the caller owns the
  wall-clock budget.

The API key is sent only as ``Authorization: Bearer``; it is kept out of ``repr``, logs and
every error message (the server's error text is scrubbed of it too).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import re
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import aiohttp
import msgspec

from actors.log_fields import fields
from actors.provider import ProviderError, ProviderEvent, ProviderRequest, ProviderTimeout
from transports.models.openai_wire import (
    StreamAssembler,
    check_options,
    decode_completion,
    encode_request,
    error_message,
)
from transports.models.sse import provider_events
from transports.models.tool_names import ToolNameMap

__all__ = ["OpenAIConfig", "OpenAIProvider", "retry_after_s", "scrub"]

_log = logging.getLogger("reel.provider")

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_KEY_LIKE = re.compile(r"\bsk-[A-Za-z0-9_*.-]{4,}")
_REDACTED = "<redacted>"


class OpenAIConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how to reach an OpenAI-compatible endpoint.

    Invalid values raise ``ValueError`` naming the field (msgspec's ``convert`` reports it as
    a validation error with the field's path when the config comes from a file).
    """

    base_url: str
    """Endpoint root including the version path, e.g. ``https://api.openai.com/v1``."""
    model: str
    """Model used when a request names none."""
    api_key: str | None = None
    """Bearer token; never logged, never in errors or ``repr``."""
    timeout_s: float = 60.0
    """Connect time-out, time-out for the response headers, and idle time between chunks."""
    stream_timeout_s: float = 600.0
    """Time-out for one whole request, streaming included."""
    max_retries: int = 2
    """Retries after the first attempt for 429, 5xx and connection failures."""
    backoff_base_s: float = 0.25
    """First back-off delay; doubled on each retry, with jitter."""
    backoff_max_s: float = 20.0
    """Longest wait between attempts; a longer ``Retry-After`` fails at once (retryable)."""
    stream: bool = True
    """Stream the answer (SSE). ``False`` asks for the whole completion at once: one text delta,
    but usage from servers that do not report it when streaming (llama-cpp-python)."""
    max_tokens: int | None = None
    """Completion limit of a request that sets none itself (a run's turns); None: the server's
    default, which on llama.cpp is the whole context."""
    temperature: float | None = None
    """Sampling temperature, 0 to 2; None: the server's default."""
    tool_choice: str | None = None
    """``auto``, ``required``, ``none`` or the catalog name of the tool the model must call;
    None: sent not at all. ``required`` and a name force a call only on a turn answering the
    person, not after tool results (:func:`~transports.models.openai_wire.encode_request`)."""
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)
    """Server-specific fields merged into every request body (``top_k``, ``cache_prompt``,
    ...); none of reel's own (:data:`~transports.models.openai_wire.OWN_FIELDS`)."""
    extra_headers: dict[str, str] = msgspec.field(default_factory=dict)
    """Sent on every request (e.g. ``OpenAI-Organization``); cannot override Authorization."""

    def __post_init__(self) -> None:
        if not re.match(r"https?://[^/\s]+", self.base_url):
            raise ValueError(f"base_url: must be an http:// or https:// URL, got {self.base_url!r}")
        if not self.model.strip():
            raise ValueError("model: must not be empty")
        key = self.api_key
        if key is not None and (not key or "\r" in key or "\n" in key):
            raise ValueError("api_key: must be non-empty and on one line")
        for field, value in (
            ("timeout_s", self.timeout_s),
            ("stream_timeout_s", self.stream_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{field}: must be greater than 0, got {value}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries: must be 0 or more, got {self.max_retries}")
        check_options(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            tool_choice=self.tool_choice,
            extra_body=self.extra_body,
        )
        for field, value in (
            ("backoff_base_s", self.backoff_base_s),
            ("backoff_max_s", self.backoff_max_s),
        ):
            if value < 0:
                raise ValueError(f"{field}: must be 0 or more, got {value}")
        for name, header_value in self.extra_headers.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"extra_headers: {name!r} is not a valid header name")
            if name.lower() == "authorization":
                raise ValueError("extra_headers: Authorization is set from api_key")
            if "\r" in header_value or "\n" in header_value:
                raise ValueError(f"extra_headers: value of {name!r} must be on one line")

    def __repr__(self) -> str:
        key = _REDACTED if self.api_key else None
        return (
            f"OpenAIConfig(base_url={self.base_url!r}, model={self.model!r}, api_key={key!r}, "
            f"timeout_s={self.timeout_s!r}, stream_timeout_s={self.stream_timeout_s!r}, "
            f"max_retries={self.max_retries!r}, backoff_base_s={self.backoff_base_s!r}, "
            f"backoff_max_s={self.backoff_max_s!r}, stream={self.stream!r}, "
            f"max_tokens={self.max_tokens!r}, temperature={self.temperature!r}, "
            f"tool_choice={self.tool_choice!r}, extra_body={sorted(self.extra_body)!r}, "
            f"extra_headers={sorted(self.extra_headers)!r})"
        )

    __str__ = __repr__


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """Seconds the server asked us to wait, from ``retry-after-ms`` or ``Retry-After``."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def scrub(text: str, key: str | None) -> str:
    """``text`` with ``key``, and anything shaped like an API key, replaced: a server's error
    text may echo what it was sent."""
    if key:
        text = text.replace(key, _REDACTED)
    return _KEY_LIKE.sub(_REDACTED, text)


class OpenAIProvider:
    """A :class:`~actors.provider.ModelProvider` for OpenAI-compatible endpoints.

    One instance holds one connection pool, created on first use inside the running event
    loop; use it from that loop only, and :meth:`aclose` it at shutdown.
    """

    def __init__(self, config: OpenAIConfig, *, name: str = "openai") -> None:
        self.name = name
        self._config = config
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._session: aiohttp.ClientSession | None = None
        headers = {
            **config.extra_headers,
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
        }
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        self._headers = headers

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, config={self._config!r})"

    async def aclose(self) -> None:
        """Close the connection pool (and with it any stream still open)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

    def _scrub(self, text: str) -> str:
        return scrub(text, self._config.api_key)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(
                total=self._config.stream_timeout_s,
                connect=self._config.timeout_s,
                sock_connect=self._config.timeout_s,
                sock_read=self._config.timeout_s,
            )
            self._session = aiohttp.ClientSession(timeout=timeout, trust_env=False)
        return self._session

    def _backoff_s(self, attempt: int) -> float:
        delay = self._config.backoff_base_s * float(2**attempt) * random.uniform(0.5, 1.0)
        return min(delay, self._config.backoff_max_s)

    def _timeout(self, what: str) -> ProviderTimeout:
        return ProviderTimeout(
            f"provider timed out {what} (timeout_s={self._config.timeout_s}, "
            f"stream_timeout_s={self._config.stream_timeout_s})"
        )

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        """Stream one chat completion; see :class:`~actors.provider.ModelProvider`."""
        names = ToolNameMap(tool.name for tool in request.tools)
        config = self._config
        payload = encode_request(
            request,
            config.model,
            names,
            stream=config.stream,
            max_tokens=config.max_tokens,
            temperature=config.temperature,
            tool_choice=config.tool_choice,
            extra_body=config.extra_body,
        )
        body = msgspec.json.encode(payload)
        session = self._client()
        attempts = self._config.max_retries + 1
        yielded = False
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            wait_s: float | None = None
            try:
                response = await session.post(self._url, data=body, headers=self._headers)
            except aiohttp.ConnectionTimeoutError:
                error: ProviderError = self._timeout("connecting")
            except (aiohttp.ServerTimeoutError, TimeoutError):
                raise self._timeout("waiting for the response") from None
            except aiohttp.ClientError as exc:
                error = ProviderError(
                    self._scrub(f"cannot reach provider: {type(exc).__name__}: {exc}"),
                    retryable=True,
                )
            else:
                completed = False
                try:
                    if response.status != 200:
                        error, wait_s = await self._status_error(response, attempt + 1)
                    else:
                        async for event in self._events(response, names):
                            yielded = True
                            yield event
                        completed = True
                        return
                except (aiohttp.ServerTimeoutError, TimeoutError):
                    raise self._timeout("waiting for the next chunk") from None
                except aiohttp.ClientError as exc:
                    error = ProviderError(
                        self._scrub(f"provider stream interrupted: {type(exc).__name__}: {exc}"),
                        retryable=True,
                    )
                    if yielded:
                        raise error from None
                finally:
                    # An unfinished stream must not go back to the pool: close the connection.
                    if completed:
                        response.release()
                    else:
                        response.close()
            if not error.retryable or last:
                raise error
            delay = self._backoff_s(attempt)
            if wait_s is not None:
                if wait_s > self._config.backoff_max_s:
                    raise error
                delay = max(delay, wait_s)
            # The error text was scrubbed of the key; the request (and its headers) is not logged.
            _log.warning(
                "provider %s: %s; retry %d of %d in %.2f s",
                self.name,
                error,
                attempt + 1,
                self._config.max_retries,
                delay,
                extra=fields(
                    provider=self.name,
                    status=error.status,
                    retry=attempt + 1,
                    max_retries=self._config.max_retries,
                    delay_s=round(delay, 3),
                ),
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _status_error(
        self, response: aiohttp.ClientResponse, attempts: int
    ) -> tuple[ProviderError, float | None]:
        status = response.status
        try:
            raw = await response.content.read(64 * 1024)
        except (aiohttp.ClientError, TimeoutError):
            raw = b""
        detail = self._scrub(error_message(raw))
        retryable = status == 429 or status >= 500
        after = f" after {attempts} attempts" if retryable and attempts > 1 else ""
        wait_s = retry_after_s(response.headers) if retryable else None
        error = ProviderError(
            f"provider returned {status}{after}: {detail}",
            retryable=retryable,
            status=status,
            retry_after_s=wait_s,
        )
        return error, wait_s

    async def _events(
        self, response: aiohttp.ClientResponse, names: ToolNameMap
    ) -> AsyncGenerator[ProviderEvent, None]:
        if response.content_type == "application/json":
            # Asked for (stream=False), or a server that ignores ``stream: true``.
            for event in decode_completion(await response.read(), names):
                yield event
            return
        async for event in provider_events(response.content.iter_any(), StreamAssembler(names)):
            yield event
