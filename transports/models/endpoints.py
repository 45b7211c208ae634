"""``[[providers]]``: the model endpoints a node fails over between, as configured.

Each entry names a kind (``openai``, ``anthropic``, ``deterministic``), where it is, its model,
where its key comes from, and how hard to try it (``timeout_s``, ``max_retries`` with jittered
back-off, the circuit breaker's ``failure_threshold`` and ``cooldown_s``) and how much of the
traffic it takes first (``weight``). :func:`check_endpoints` checks the list as a whole,
:func:`make_endpoint` makes one endpoint's provider, and
:class:`~transports.models.failover.FailoverProvider` fails over between them
(``transports.runtime.make_provider`` composes it; docs/providers.md, "Failover").

The key is never in the file: ``api_key = { vault = "NAME" }`` or ``"${vault:NAME}"`` names a
vault secret (docs/vault.md), read when the endpoint is first used; ``api_key_env`` names an
environment variable, read when the node starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import msgspec

from actors.provider import ModelProvider, ProviderError
from tools.handles import HandleValue, MissingSecret, names_in, resolve
from tools.result import ToolFault
from transports.models.openai_wire import check_options

__all__ = [
    "EndpointConfig",
    "EndpointKind",
    "Secrets",
    "check_endpoints",
    "make_endpoint",
    "vault_names",
]

EndpointKind = Literal["openai", "anthropic", "deterministic"]
Secrets = Callable[[str], str]
"""The vault's lookup (``Vault.resolve``): a secret's value, or ``MissingSecret``."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}")


class EndpointConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One ``[[providers]]`` entry. A bad value raises ``ValueError("<key>: <problem>")``."""

    kind: EndpointKind
    name: str = ""
    """How logs, metrics, ``reel status`` and ``run.turn_completed`` name it; default: its
    ``base_url`` (the kind, for the deterministic one). Unique in the list."""
    base_url: str = ""
    """``openai``: the root with the version path (``https://api.openai.com/v1``);
    ``anthropic``: the root without it (default ``https://api.anthropic.com``)."""
    model: str = ""
    api_key: HandleValue | None = None
    """``{ vault = "NAME" }`` or ``"${vault:NAME}"``: never the key itself."""
    api_key_env: str = ""
    """The environment variable holding the key (instead of ``api_key``)."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """Connect, response headers, and each gap between streamed chunks."""
    weight: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 0
    """0: taken in list order. Endpoints with a weight share the first try of each turn in
    proportion (the rest follow in list order)."""
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=10)] = 2
    """Retries on this endpoint (429, 5xx, connection failures) before failing over."""
    backoff_base_s: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.25
    backoff_max_s: Annotated[float, msgspec.Meta(ge=0, le=600)] = 20.0
    failure_threshold: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 3
    """Consecutive failed attempts that open the circuit."""
    cooldown_s: Annotated[float, msgspec.Meta(ge=0, le=86400)] = 30.0
    """How long an open circuit sends nothing before one probe."""
    max_tokens: int | None = None
    temperature: float | None = None
    tool_choice: str | None = None
    stream: bool = True
    """``openai`` only: ``false`` asks for whole completions."""
    extra_body: dict[str, Any] = {}
    """``openai`` only: server-specific request fields."""
    chunk_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """``deterministic`` only: pause between streamed words."""

    def __post_init__(self) -> None:
        if self.name and not _NAME.fullmatch(self.name):
            raise ValueError(f"name: must match {_NAME.pattern}, got {self.name[:40]!r}")
        if self.kind != "deterministic":
            if self.kind == "openai" and not self.base_url:
                raise ValueError("base_url: an openai endpoint needs one")
            if self.base_url and not re.match(r"https?://[^/\s]+", self.base_url):
                raise ValueError(
                    f"base_url: must be an http:// or https:// URL, got {self.base_url!r}"
                )
            if not self.model.strip():
                raise ValueError(f"model: a {self.kind} endpoint needs one")
        if isinstance(self.api_key, str) and not names_in(self.api_key):
            raise ValueError(
                'api_key: the key is never written in config: give { vault = "NAME" }, '
                '"${vault:NAME}" or api_key_env'
            )
        if self.api_key is not None and self.api_key_env:
            raise ValueError("api_key_env: set api_key or api_key_env, not both")
        if self.api_key_env and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(f"api_key_env: not a variable name: {self.api_key_env[:40]!r}")
        temperature = self.temperature
        if self.kind == "anthropic" and temperature is not None and not 0 <= temperature <= 1:
            raise ValueError(f"temperature: must be between 0 and 1, got {self.temperature}")
        check_options(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            tool_choice=self.tool_choice,
            extra_body=self.extra_body,
        )
        if self.kind != "openai" and (self.extra_body or not self.stream):
            key = "extra_body" if self.extra_body else "stream"
            raise ValueError(f"{key}: only an openai endpoint reads it")

    @property
    def label(self) -> str:
        """The endpoint's name: ``name``, else ``base_url`` without any user or password in
        it (the label goes to logs, metrics and the journal), else the kind."""
        if self.name:
            return self.name
        if self.base_url:
            parts = urlsplit(self.base_url)
            return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        return self.kind

    def vault_names(self) -> tuple[str, ...]:
        """The vault secrets its key names."""
        return names_in(self.api_key) if self.api_key is not None else ()


def check_endpoints(endpoints: Sequence[EndpointConfig], environ: Mapping[str, str]) -> None:
    """Raise ``ValueError("providers[i].<key>: <problem>")`` for what only the whole list, or
    the environment, shows: two endpoints of one name, a key variable that is not set."""
    seen: dict[str, int] = {}
    for index, endpoint in enumerate(endpoints):
        label = endpoint.label
        if label in seen:
            raise ValueError(
                f"providers[{index}].name: {label!r} is also providers[{seen[label]}]'s name "
                "(give each endpoint its own name)"
            )
        seen[label] = index
        if endpoint.api_key_env and not environ.get(endpoint.api_key_env):
            raise ValueError(
                f"providers[{index}].api_key_env: the variable {endpoint.api_key_env} is not set"
            )


def vault_names(endpoints: Sequence[EndpointConfig]) -> list[tuple[int, str]]:
    """``(index, secret name)`` of every vault secret the endpoints' keys name."""
    return [(i, name) for i, e in enumerate(endpoints) for name in e.vault_names()]


def _key(
    endpoint: EndpointConfig, secrets: Secrets | None, environ: Mapping[str, str]
) -> str | None:
    if endpoint.api_key_env:
        return environ.get(endpoint.api_key_env) or None
    if endpoint.api_key is None:
        return None

    def lookup(name: str) -> str:
        if secrets is None:
            raise MissingSecret(name)
        return secrets(name)

    value: HandleValue = endpoint.api_key
    try:
        return resolve(value, lookup, "api_key")
    except ToolFault as exc:
        raise ProviderError(
            f"endpoint {endpoint.label}: {exc}", retryable=False, status=401
        ) from None


def make_endpoint(
    endpoint: EndpointConfig,
    secrets: Secrets | None = None,
    environ: Mapping[str, str] | None = None,
) -> ModelProvider:
    """The provider that speaks to ``endpoint`` (one attempt per stream: the failover layer
    retries). Its key is resolved now: a vault secret that is gone raises ``ProviderError``
    (status 401, so the failover layer counts it against the endpoint)."""
    env = os.environ if environ is None else environ
    if endpoint.kind == "deterministic":
        from transports.models.deterministic import DeterministicProvider

        return DeterministicProvider(chunk_delay_s=endpoint.chunk_delay_s, name="deterministic")
    key = _key(endpoint, secrets, env)
    if endpoint.kind == "anthropic":
        from transports.models.anthropic import AnthropicConfig, AnthropicProvider

        return AnthropicProvider(
            AnthropicConfig(
                base_url=endpoint.base_url or "https://api.anthropic.com",
                model=endpoint.model,
                api_key=key,
                timeout_s=endpoint.timeout_s,
                max_tokens=endpoint.max_tokens,
                temperature=endpoint.temperature,
                tool_choice=endpoint.tool_choice,
            ),
            name=endpoint.label,
        )
    from transports.models.openai import OpenAIConfig, OpenAIProvider

    return OpenAIProvider(
        OpenAIConfig(
            base_url=endpoint.base_url,
            model=endpoint.model,
            api_key=key,
            timeout_s=endpoint.timeout_s,
            max_retries=0,
            stream=endpoint.stream,
            max_tokens=endpoint.max_tokens,
            temperature=endpoint.temperature,
            tool_choice=endpoint.tool_choice,
            extra_body=endpoint.extra_body,
        ),
        name=endpoint.label,
    )
