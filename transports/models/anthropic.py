"""Anthropic's Messages API over aiohttp: streamed text and tool use, usage with cache tokens.

``POST {base_url}/v1/messages`` with ``stream: true``; the events are read as
:mod:`transports.models.anthropic_wire` says. One attempt per :meth:`AnthropicProvider.stream`:
retries, back-off and failover to another endpoint are the failover layer's
(:mod:`transports.models.failover`), which every node provider goes through. Failures:

- a connection that cannot be made, or is lost before any output: retryable ``ProviderError``;
- HTTP 429, 5xx and 529 (overloaded): retryable, with the server's ``retry-after`` when it
  sends one; other statuses fail with the server's explanation (``provider returned 401:
  authentication_error: invalid x-api-key``), not retryable;
- an ``error`` event mid-stream: retryable when its type is ``overloaded_error``,
  ``api_error`` or ``rate_limit_error``;
- ``timeout_s`` bounds connecting, the response headers and each gap between events,
  ``stream_timeout_s`` the whole request: :class:`~actors.provider.ProviderTimeout`.

The key goes only in the ``x-api-key`` header; it is kept out of ``repr``, logs and every error
message (the server's error text is scrubbed of it too).
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator

import aiohttp
import msgspec

from actors.provider import ProviderError, ProviderEvent, ProviderRequest, ProviderTimeout
from transports.models.anthropic_wire import API_VERSION, MessageAssembler, encode_request
from transports.models.openai import retry_after_s, scrub
from transports.models.openai_wire import check_options, error_message
from transports.models.sse import provider_events
from transports.models.tool_names import ToolNameMap

__all__ = ["AnthropicConfig", "AnthropicProvider"]


class AnthropicConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where and how to reach the Messages API. Invalid values raise ``ValueError`` naming the
    field."""

    base_url: str = "https://api.anthropic.com"
    """The API root, without ``/v1`` (``/v1/messages`` is appended)."""
    model: str
    """Model used when a request names none (``claude-sonnet-4-5``)."""
    api_key: str | None = None
    """Sent as ``x-api-key``; never logged, never in errors or ``repr``."""
    timeout_s: float = 60.0
    stream_timeout_s: float = 600.0
    max_tokens: int | None = None
    """A turn's output limit when the request sets none (the API requires one: default 4096)."""
    temperature: float | None = None
    """0 to 1; None: the API's default."""
    tool_choice: str | None = None
    """As the OpenAI provider's: ``auto``, ``required`` (sent as ``any``), ``none`` or a tool's
    catalog name, forcing a call only on a turn that answers the person."""

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
        if self.temperature is not None and not 0 <= self.temperature <= 1:
            raise ValueError(f"temperature: must be between 0 and 1, got {self.temperature}")
        check_options(
            max_tokens=self.max_tokens,
            temperature=None,
            tool_choice=self.tool_choice,
            extra_body={},
        )

    def __repr__(self) -> str:
        key = "<redacted>" if self.api_key else None
        return (
            f"AnthropicConfig(base_url={self.base_url!r}, model={self.model!r}, api_key={key!r}, "
            f"timeout_s={self.timeout_s!r}, stream_timeout_s={self.stream_timeout_s!r}, "
            f"max_tokens={self.max_tokens!r}, temperature={self.temperature!r}, "
            f"tool_choice={self.tool_choice!r})"
        )

    __str__ = __repr__


class AnthropicProvider:
    """A :class:`~actors.provider.ModelProvider` for the Anthropic Messages API.

    One instance holds one connection pool, created on first use inside the running event
    loop; use it from that loop only, and :meth:`aclose` it at shutdown.
    """

    def __init__(self, config: AnthropicConfig, *, name: str = "anthropic") -> None:
        self.name = name
        self._config = config
        self._url = config.base_url.rstrip("/") + "/v1/messages"
        self._session: aiohttp.ClientSession | None = None
        self._headers = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "anthropic-version": API_VERSION,
        }
        if config.api_key:
            self._headers["x-api-key"] = config.api_key

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, config={self._config!r})"

    async def aclose(self) -> None:
        """Close the connection pool (and with it any stream still open)."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()

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

    def _timeout(self, what: str) -> ProviderTimeout:
        return ProviderTimeout(
            f"provider timed out {what} (timeout_s={self._config.timeout_s}, "
            f"stream_timeout_s={self._config.stream_timeout_s})"
        )

    async def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        """Stream one message; see :class:`~actors.provider.ModelProvider`."""
        names = ToolNameMap(tool.name for tool in request.tools)
        config = self._config
        body = msgspec.json.encode(
            encode_request(
                request,
                config.model,
                names,
                max_tokens=config.max_tokens,
                temperature=config.temperature,
                tool_choice=config.tool_choice,
            )
        )
        key = config.api_key
        try:
            response = await self._client().post(self._url, data=body, headers=self._headers)
        except aiohttp.ConnectionTimeoutError:
            raise self._timeout("connecting") from None
        except (aiohttp.ServerTimeoutError, TimeoutError):
            raise self._timeout("waiting for the response") from None
        except aiohttp.ClientError as exc:
            text = f"cannot reach provider: {type(exc).__name__}: {exc}"
            raise ProviderError(scrub(text, key), retryable=True) from None
        completed = False
        try:
            if response.status != 200:
                raise await self._status_error(response)
            async for event in self._events(response, names):
                yield event
            completed = True
        except (aiohttp.ServerTimeoutError, TimeoutError):
            raise self._timeout("waiting for the next event") from None
        except aiohttp.ClientError as exc:
            text = f"provider stream interrupted: {type(exc).__name__}: {exc}"
            raise ProviderError(scrub(text, key), retryable=True) from None
        finally:
            if completed:
                response.release()
            else:
                response.close()  # an unfinished stream must not go back to the pool

    async def _status_error(self, response: aiohttp.ClientResponse) -> ProviderError:
        status = response.status
        try:
            raw = await response.content.read(64 * 1024)
        except (aiohttp.ClientError, TimeoutError):
            raw = b""
        detail = scrub(_error_detail(raw), self._config.api_key)
        retryable = status == 429 or status >= 500
        return ProviderError(
            f"provider returned {status}: {detail}",
            retryable=retryable,
            status=status,
            retry_after_s=retry_after_s(response.headers) if retryable else None,
        )

    async def _events(
        self, response: aiohttp.ClientResponse, names: ToolNameMap
    ) -> AsyncGenerator[ProviderEvent, None]:
        async for event in provider_events(response.content.iter_any(), MessageAssembler(names)):
            yield event


class _ErrorDetail(msgspec.Struct):
    type: str = ""
    message: str = ""


class _ErrorBody(msgspec.Struct):
    error: _ErrorDetail | None = None


def _error_detail(raw: bytes) -> str:
    """``type: message`` of the API's ``{"type": "error", "error": {...}}``, else what
    :func:`~transports.models.openai_wire.error_message` makes of the body."""
    try:
        body = msgspec.json.decode(raw, type=_ErrorBody)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return error_message(raw)
    if body.error is not None and body.error.type and body.error.message:
        return f"{body.error.type}: {error_message(raw)}"
    return error_message(raw)
