"""Model providers: implementations of the :mod:`actors.provider` seam.

The run actor depends only on :class:`actors.provider.ModelProvider`; the composition root
picks one of these and injects it:

- :class:`DeterministicProvider` — the embedded default: offline, reproducible, echoes the
  user's text and proposes tool calls on request (``/tool``, ``/tool-loop``, ``/sleep``,
  ``/fail``; see docs/providers.md).
- :class:`OpenAIProvider` with :class:`OpenAIConfig` — any OpenAI-compatible chat-completions
  endpoint over aiohttp: streaming, tool calls, usage, retries with back-off.
- :class:`AnthropicProvider` with :class:`AnthropicConfig` — Anthropic's Messages API:
  streamed text and tool use, usage with cache tokens (one attempt per turn).
- :class:`FailoverProvider` — over the endpoints of ``[[providers]]`` (or ``[provider]``'s
  one): retries with jittered back-off, a circuit breaker per endpoint, failover within a turn
  before any output (``failover``, ``circuit``, ``endpoints``).

Exception tree (defined in :mod:`actors.provider`, the seam, so the run actor can catch it)::

    ProviderError            a provider call failed (.retryable, .status)
    └── ProviderTimeout      connect, response or between-chunk time-out

Bad configuration raises ``ValueError`` naming the field.
"""

from typing import TYPE_CHECKING, Any

from actors.provider import ProviderError, ProviderTimeout
from transports.models.deterministic import DeterministicProvider
from transports.models.tool_names import ToolNameMap

if TYPE_CHECKING:
    from transports.models.anthropic import AnthropicConfig, AnthropicProvider
    from transports.models.failover import FailoverProvider
    from transports.models.openai import OpenAIConfig, OpenAIProvider


def __getattr__(name: str) -> Any:
    """The HTTP providers are imported on first use: they need aiohttp (a fifth of a second),
    which a CLI command reading ``transports.models.openai_wire``'s checks never uses."""
    if name in ("OpenAIConfig", "OpenAIProvider"):
        from transports.models import openai

        return getattr(openai, name)
    if name in ("AnthropicConfig", "AnthropicProvider"):
        from transports.models import anthropic

        return getattr(anthropic, name)
    if name == "FailoverProvider":
        from transports.models.failover import FailoverProvider

        return FailoverProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AnthropicConfig",
    "AnthropicProvider",
    "DeterministicProvider",
    "FailoverProvider",
    "OpenAIConfig",
    "OpenAIProvider",
    "ProviderError",
    "ProviderTimeout",
    "ToolNameMap",
]
