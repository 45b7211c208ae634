"""The model-provider seam: what the run actor asks a language model, and what it gets back.

Imports only point down (``transports -> actors``), so the *interface* lives here, where the run
actor uses it, and the implementations (``transports.models``: the deterministic provider and the
OpenAI-compatible client) are injected by the composition root.

Contract of :class:`ModelProvider.stream`:

- It is an async generator. It yields, in order: any number of :class:`TextDelta` and
  :class:`ToolCall` items, at most one :class:`Usage`, and exactly one :class:`TurnEnd`, which is
  always the last item. A provider that does not report usage yields no ``Usage``.
- A :class:`ToolCall` is yielded only when complete: providers assemble streamed fragments.
  Its ``arguments`` are the JSON text the model produced, possibly invalid: the run decides
  (``actors.runs.decide.unusable_calls``: a turn with invalid JSON, or cut off at ``length``,
  makes no call and fails the run ``provider_error``; the tool validates the rest).
- Tool names go in and come out exactly as the catalog spells them (``fs.read``); any mapping a
  wire protocol needs is the provider's business.
- Cancelling the consuming task (or closing the generator, e.g. with ``contextlib.aclosing``)
  stops it promptly and closes its connections.
- Failures raise :class:`ProviderError`; messages never contain credentials.

Exception tree::

    ProviderError            a provider call failed (.retryable, .status, .retry_after_s)
    ├── ProviderTimeout      connect, response or between-chunk time-out
    └── ProviderUnavailable  no configured endpoint could answer (all failed, or their circuits
                             are open): the run fails ``provider_unavailable``
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal, Protocol

import msgspec

__all__ = [
    "ChatMessage",
    "ModelProvider",
    "ProviderError",
    "ProviderEvent",
    "ProviderRequest",
    "ProviderTimeout",
    "ProviderUnavailable",
    "Role",
    "TextDelta",
    "ToolCall",
    "ToolDefinition",
    "TurnEnd",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]
"""Who said a message; ``tool`` messages carry a tool result back to the model."""


class ToolCall(msgspec.Struct, frozen=True):
    """A complete tool call proposed by the model (also a stream item)."""

    id: str
    """Provider-assigned id; a ``tool`` message answers it through ``tool_call_id``."""
    name: str
    """The tool's catalog name, dotted names included (``fs.read``)."""
    arguments: str
    """The JSON text the model produced for the arguments; may be invalid JSON."""


class ChatMessage(msgspec.Struct, frozen=True):
    """One message of the conversation handed to the model."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """For ``assistant`` messages: the calls the model proposed on that turn."""
    tool_call_id: str | None = None
    """For ``tool`` messages: the id of the call this message answers."""
    name: str | None = None
    """For ``tool`` messages: the tool's name (optional; providers may look it up by id)."""


class ToolDefinition(msgspec.Struct, frozen=True):
    """A tool the model may call."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema of the arguments object."""


class ProviderRequest(msgspec.Struct, frozen=True):
    """Everything one model turn needs."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolDefinition, ...] = ()
    model: str | None = None
    """Overrides the provider's configured model when set."""
    max_tokens: int | None = None
    """Upper bound on completion tokens; a provider that hits it ends with ``length``."""


class TextDelta(msgspec.Struct, frozen=True):
    """A piece of the model's answer text, in order."""

    text: str


class Usage(msgspec.Struct, frozen=True):
    """Token accounting for the turn, as the provider reports it.

    ``cached_tokens`` is the part of ``prompt_tokens`` the provider served from its prompt cache
    (0 when it does not say); ``model`` is the model that answered as the provider names it, and
    ``endpoint`` the configured endpoint that answered ("" when the provider does not know)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    model: str = ""
    endpoint: str = ""


class TurnEnd(msgspec.Struct, frozen=True):
    """The last item of every successful stream."""

    finish_reason: str
    """As the provider says it: ``stop``, ``tool_calls``, ``length``, ``content_filter``, ..."""


ProviderEvent = TextDelta | ToolCall | Usage | TurnEnd
"""One item of a provider stream."""


class ModelProvider(Protocol):
    """A language model the run actor can stream one turn from."""

    name: str
    """Short, stable name for events and logs (``deterministic``, ``openai``)."""

    def stream(self, request: ProviderRequest) -> AsyncGenerator[ProviderEvent, None]:
        """Stream one model turn; see the module docstring.

        Typed as an async *generator* (not just an iterator) so a consumer can close it
        deterministically with ``contextlib.aclosing`` when it stops early.
        """
        ...

    async def aclose(self) -> None:
        """Release connections and other resources; safe to call more than once."""
        ...


class ProviderError(Exception):
    """A provider call failed.

    ``retryable`` says whether the same request might succeed later (rate limits, server
    errors, lost connections); ``status`` is the HTTP status when there was one;
    ``retry_after_s`` the wait the server asked for (``Retry-After``), when it did. The message
    is safe to record and show: it never contains credentials.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        retry_after_s: float | None = None,
    ):
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after_s = retry_after_s

    @property
    def message(self) -> str:
        """The error text (``str(error)``)."""
        return str(self.args[0]) if self.args else ""


class ProviderTimeout(ProviderError):
    """The provider did not connect, answer, or send the next chunk in time."""

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None):
        super().__init__(message, retryable=retryable, status=status)


class ProviderUnavailable(ProviderError):
    """No configured endpoint could answer the turn: each failed, or its circuit breaker is open
    (``transports.models.failover``). The run fails ``provider_unavailable``."""

    def __init__(self, message: str, *, retryable: bool = True, status: int | None = None):
        super().__init__(message, retryable=retryable, status=status)
