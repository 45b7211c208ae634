"""Model providers: implementations of the :mod:`actors.provider` seam.

The run actor depends only on :class:`actors.provider.ModelProvider`; the composition root
picks one of these and injects it:

- :class:`DeterministicProvider` — the embedded default: offline, reproducible, echoes the
  user's text and proposes tool calls on request (``/tool``, ``/tool-loop``, ``/sleep``,
  ``/fail``; see docs/providers.md).
- :class:`OpenAIProvider` with :class:`OpenAIConfig` — any OpenAI-compatible chat-completions
  endpoint over aiohttp: streaming, tool calls, usage, retries with back-off.

Exception tree (defined in :mod:`actors.provider`, the seam, so the run actor can catch it)::

    ProviderError            a provider call failed (.retryable, .status)
    └── ProviderTimeout      connect, response or between-chunk time-out

Bad configuration raises ``ValueError`` naming the field.
"""

from actors.provider import ProviderError, ProviderTimeout
from transports.models.deterministic import DeterministicProvider
from transports.models.openai import OpenAIConfig, OpenAIProvider
from transports.models.tool_names import ToolNameMap

__all__ = [
    "DeterministicProvider",
    "OpenAIConfig",
    "OpenAIProvider",
    "ProviderError",
    "ProviderTimeout",
    "ToolNameMap",
]
