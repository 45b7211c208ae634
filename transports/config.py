"""Node configuration: ``config.toml`` in the data dir plus ``REEL_<SECTION>_<KEY>`` overrides.

Every table and key is declared here; an unknown one is an error naming its path
(``runs.max_turnz``), whether it comes from the file or the environment. Environment values are
parsed as TOML values when they parse (numbers, booleans, arrays), else taken as strings.
Secrets (a provider's API key) are read from the environment variable named by
``provider.api_key_env`` (or a ``[[providers]]`` endpoint's ``api_key_env``), or from the vault
an endpoint's ``api_key`` names; never from this file, never written to the journal or logs.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec

from actors.budgets.config import Budget
from actors.channels.config import ChannelConfig
from actors.config import ActorsConfig, RunBudgets
from actors.learning.desk import LearningSettings
from actors.tasks.queue import TasksConfig
from actors.watchdog.checks import WatchdogConfig
from events.redaction.redact import redact_text
from projections.pool import ReaderLimits
from projections.usage import Price
from tools import ToolsConfig
from tools.mcp.config import McpConfig
from tools.spec import Posture
from transports.models.endpoints import EndpointConfig
from transports.models.openai_wire import check_options


class ConfigError(Exception):
    """The configuration is invalid; the message names the key and the problem."""


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class HttpConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8470
    max_body_bytes: int = 1 << 20


class GrpcConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8471
    max_message_bytes: int = 4 << 20


class ProviderConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    kind: Literal["deterministic", "openai"] = "deterministic"
    chunk_delay_s: float = 0.0
    """Deterministic provider: pause between streamed words (demos, cancellation tests)."""
    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the API key (the key itself is never in config)."""
    timeout_s: float = 60.0
    max_retries: int = 2
    max_tokens: int | None = None
    """Completion tokens a run's model turn may use; unset: the server's default (on llama.cpp
    the whole context, docs/providers.md)."""
    temperature: float | None = None
    """0 to 2; unset: the server's default."""
    tool_choice: str | None = None
    """``auto``, ``required``, ``none`` or the tool the model must call on a turn answering the
    person; unset: not sent (docs/providers.md)."""
    stream: bool = True
    """``false``: whole completions (usage from servers that report it only then)."""
    extra_body: dict[str, Any] = {}
    """Server-specific request fields (``{ top_k = 40 }``); never one of reel's own."""

    def __post_init__(self) -> None:
        check_options(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            tool_choice=self.tool_choice,
            extra_body=self.extra_body,
        )


_ACTORS = ActorsConfig()
"""The actors' defaults: the one home of every default the actors run with (the sections below
embed the actors' Structs or name these values, never write them again)."""


class RunsConfig(RunBudgets, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[runs]``: the budgets every run stops at (actors.config.RunBudgets), its system
    prompt, and how long a draining node lets live runs finish."""

    system_prompt: str = _ACTORS.system_prompt
    drain_grace_s: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 10.0
    """On SIGTERM/SIGINT, how long live runs get to finish before the rest are cancelled
    (``REEL_RUNS_DRAIN_GRACE_S``; 0: cancel at once)."""


class SessionsConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    idle_passivate_s: float = _ACTORS.idle_passivate_s
    max_message_bytes: int = _ACTORS.max_message_bytes


class ApprovalsConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    timeout_s: float = _ACTORS.approval_timeout_s


class JournalConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    backend: Literal["sqlite", "postgres"] = "sqlite"
    """Where the journal lives (``REEL_JOURNAL_BACKEND``): ``sqlite``, the data dir's
    journal.db (the default), or ``postgres``, the database ``dsn`` names, created with
    ``reel journal init`` (one node only so far: docs/scale-out.md)."""
    dsn: str = ""
    """The PostgreSQL connection string (``REEL_JOURNAL_DSN``; keep its password there, in
    ``PGPASSWORD`` or in ~/.pgpass rather than in config.toml). Never shown with its password."""
    shards: Annotated[int, msgspec.Meta(ge=0, le=4096)] = 0
    """The shard count the database must have been created with (0: whatever it has)."""
    synchronous: Literal["NORMAL", "FULL", "EXTRA"] = "FULL"
    checkpoint_every_events: int = 10_000
    checkpoint_every_s: float = 60.0
    witness: str = ""
    """A file outside the data dir (ideally on another volume) where every signed checkpoint
    is also appended (``REEL_JOURNAL_WITNESS``); empty: no witness. The node refuses to start
    when it is set but cannot be used (docs/journal-format.md section 7)."""


class ClusterConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[cluster]``: this node as one of several on one PostgreSQL journal (docs/scale-out.md).
    Empty ``node``: a lone node (it holds every shard, the default)."""

    node: Annotated[str, msgspec.Meta(pattern=r"^([a-z0-9][a-z0-9_.-]{0,62})?$")] = ""
    """This node's name in the cluster (``REEL_CLUSTER_NODE``): unique among the nodes, the
    same across its restarts. Needs ``[journal] backend = "postgres"``."""
    ttl_s: Annotated[float, msgspec.Meta(ge=0.5, le=300)] = 5.0
    """How long a renewal keeps this node's shards: a dead node's sessions move after about
    this plus a quarter of it."""
    ready_ticks: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    """Healthy renewals in a row before a node (new, restarted, back from a pause) gets shards."""
    host: str = "127.0.0.1"
    """Where the internal service (commands forwarded between nodes) listens."""
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 8473
    """Its port (0: any free one)."""
    advertise: str = ""
    """``host:port`` the other nodes dial to reach it (empty: ``host`` and the bound port)."""
    allow_config_change: bool = False
    """Join even when a live node runs another config or policies (its ``config_hash``
    differs): only while rolling a change through the nodes one at a time."""
    retry_start_s: Annotated[float, msgspec.Meta(ge=1, le=3600)] = 30.0
    """How long a node leaves alone a singleton whose work failed to start on it (a chat
    channel whose homeserver refused the bot): it gives the lease back at once, another node
    may try meanwhile, and this one tries again after this long."""


class VaultConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    key_file: str = ""
    """The file of the key the vault's values are encrypted with (``REEL_VAULT_KEY_FILE``);
    empty: ``<data dir>/vault.key``. Made 0600 on first use, refused when others may read it.
    Keep it outside the data dir (another volume, a secrets mount) so that a copy of the data
    dir alone reads no value (docs/vault.md)."""


class TelemetryConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[telemetry]``: OpenTelemetry traces of runs over OTLP/HTTP (docs/telemetry.md). Nothing
    is sent, and the SDK is not even imported, unless ``otlp_endpoint`` is set."""

    otlp_endpoint: str = ""
    """The collector's OTLP/HTTP base URL (``http://127.0.0.1:4318``; traces go to its
    ``/v1/traces``) (``REEL_TELEMETRY_OTLP_ENDPOINT``); empty: no traces. Credentials never go
    in the URL: the exporter reads headers from ``OTEL_EXPORTER_OTLP_HEADERS``."""
    service_name: Annotated[str, msgspec.Meta(min_length=1, max_length=64)] = "reel"
    """The ``service.name`` of the node's spans."""
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 5.0
    """How long one export (with its retries) may take, and the node's stop waits for the
    last one at most."""
    export_every_s: Annotated[float, msgspec.Meta(gt=0, le=60)] = 2.0
    """How often queued spans are sent (sooner when a batch is full)."""
    max_queue_spans: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 4096
    """Spans waiting for export at most; past it the oldest are dropped, never waited for."""
    max_batch_spans: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 512
    """Spans per export request at most (no more than ``max_queue_spans``)."""

    def __post_init__(self) -> None:
        if self.otlp_endpoint:
            _check_endpoint(self.otlp_endpoint)
        if self.max_batch_spans > self.max_queue_spans:
            raise ValueError("max_batch_spans: must not exceed max_queue_spans")

    @property
    def traces_url(self) -> str:
        """Where spans are posted: the endpoint's ``/v1/traces`` (an endpoint that already
        ends with it is taken as it is)."""
        base = self.otlp_endpoint.rstrip("/")
        return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def _check_endpoint(url: str) -> None:
    """An http(s) URL with a host, no credentials, query or fragment (``ValueError``
    naming ``otlp_endpoint``)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a port out of range)
    except ValueError:
        raise ValueError("otlp_endpoint: not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("otlp_endpoint: must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError(
            "otlp_endpoint: must not hold credentials (set OTEL_EXPORTER_OTLP_HEADERS)"
        )
    if parts.query or parts.fragment:
        raise ValueError("otlp_endpoint: must have no query or fragment")


class ContextSection(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[context]``: how much a run's model input may hold, and when a session's older runs
    are condensed into a summary (docs/context.md)."""

    budget_tokens: Annotated[int, msgspec.Meta(ge=256)] = _ACTORS.context_budget_tokens
    """Estimated input tokens of a run's first model call (``REEL_CONTEXT_BUDGET_TOKENS``)."""
    model_budgets: dict[str, Annotated[int, msgspec.Meta(ge=256)]] = {}
    """Per model (``provider.model``), e.g. ``{ "llama-3.2-3b" = 6000 }``: wins over
    ``budget_tokens`` for that model."""
    compact_at: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = _ACTORS.compact_at
    """Compact a session after a run once its history passes this fraction of what earlier
    turns may use; 0: only on request."""
    cooldown_s: Annotated[float, msgspec.Meta(ge=0.0)] = _ACTORS.compact_cooldown_s
    """At least this long between a session's compaction and its next automatic one."""

    def budget_for(self, model: str) -> int:
        """The budget of ``model`` (``budget_tokens`` unless ``model_budgets`` names it)."""
        return self.model_budgets.get(model, self.budget_tokens)


class MemoryConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[memory]``: how memory items are indexed and how many a run is shown (docs/memory.md)."""

    embedder: str = "hashing"
    """The embedder of the memory view's vectors (``REEL_MEMORY_EMBEDDER``): ``hashing`` (built
    in) or ``e5-small`` (the ``embeddings`` extra). A name that does not load stops the node
    with the extra to install. Switching rebuilds the memory view from the journal."""
    inject_k: Annotated[int, msgspec.Meta(ge=0, le=20)] = _ACTORS.memory_inject_k
    """At most this many memory items are injected into a run's context (0: none)."""
    min_score: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = _ACTORS.memory_min_score
    """A memory hit is injected at or above this final score..."""
    min_evidence: Annotated[float, msgspec.Meta(ge=0.0, le=100.0)] = _ACTORS.memory_min_evidence
    """...or when two or more of the message's words found in it weigh this much (0: off;
    docs/context.md, "Memory auto-injection")."""


class ViewsSection(ReaderLimits, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[views]``: how many read connections to views.db each reader keeps, and how long an
    unused one stays open (projections.pool.ReaderLimits; docs/operations.md, "Views")."""


class WatchdogSection(WatchdogConfig, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[watchdog]``: ``mode`` (``observe`` records incidents, ``auto`` also acts) and the limits
    of each check (actors.watchdog.checks.WatchdogConfig; docs/operations.md, "Watchdog")."""


class UsageSection(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[usage]``: the price table usage is costed with (docs/usage.md). No price is built in:
    a model with no price has a null cost and counts 0 towards cost budgets."""

    prices: dict[str, Price] = {}
    """``[usage.prices."MODEL"]``: ``input_per_mtok``, ``output_per_mtok`` and optionally
    ``cached_input_per_mtok``, per million tokens, by the model as the usage view names it."""


BUDGET_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
"""A ``[budgets.<name>]`` name: what refusals, run failures and incidents name."""


CONNECTOR_KEYS: dict[str, tuple[str, ...]] = {
    "webhook": ("secret_env", "outbound_url", "outbound_timeout_s"),
    "matrix": ("homeserver", "user_id", "password_env", "access_token_env", "allow_rooms"),
}
"""The ``[channels.<name>]`` keys only one connector reads (the router's keys are everyone's)."""


def foreign_keys(config: ChannelConfig) -> list[str]:
    """The keys ``config`` sets away from their defaults that only another kind of connector
    reads: a connector refuses them, so a key meant for Matrix is never silently ignored on a
    webhook channel."""
    defaults = {f.name: f.default for f in msgspec.structs.fields(ChannelConfig)}
    return [
        key
        for kind, keys in CONNECTOR_KEYS.items()
        if kind != config.kind
        for key in keys
        if getattr(config, key) != defaults[key]
    ]


class TasksSection(TasksConfig, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[tasks]``: the background task queue's worker pool, leases and retry defaults
    (actors.tasks.queue.TasksConfig; docs/tasks.md)."""


class LearningSection(LearningSettings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[learning]``: post-run reflection (on or off, which extractor, the model's time-out,
    attempts) and the per-kind auto-apply thresholds (actors.learning.desk.LearningSettings;
    docs/learning.md)."""


class ToolsSection(ToolsConfig, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[tools]``: every limit and allowlist of the tool runtimes (tools.ToolsConfig), plus the
    posture of each tool. ``workspace_dir`` and ``plugin_dir`` default to the data dir's."""

    postures: dict[str, Posture] = {}


class NodeConfig(_Strict, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Everything ``reel node`` reads. Defaults are safe: loopback only, no shell, no egress."""

    http: HttpConfig = HttpConfig()
    grpc: GrpcConfig = GrpcConfig()
    provider: ProviderConfig = ProviderConfig()
    providers: list[EndpointConfig] = []
    """``[[providers]]``: endpoints failed over in order, instead of ``[provider]``
    (docs/providers.md, "Failover")."""
    runs: RunsConfig = RunsConfig()
    sessions: SessionsConfig = SessionsConfig()
    approvals: ApprovalsConfig = ApprovalsConfig()
    journal: JournalConfig = JournalConfig()
    cluster: ClusterConfig = ClusterConfig()
    """``[cluster]``: several nodes on one PostgreSQL journal (docs/scale-out.md)."""
    tools: ToolsSection = ToolsSection()
    context: ContextSection = ContextSection()
    memory: MemoryConfig = MemoryConfig()
    channels: dict[
        Annotated[str, msgspec.Meta(pattern=r"^[a-z][a-z0-9_.-]{0,31}$")], ChannelConfig
    ] = {}
    """``[channels.<name>]``: chat channels (docs/channels.md)."""
    watchdog: WatchdogSection = WatchdogSection()
    learning: LearningSection = LearningSection()
    tasks: TasksSection = TasksSection()
    views: ViewsSection = ViewsSection()
    mcp: McpConfig = McpConfig()
    """``[mcp.servers.<name>]``: MCP servers whose tools join the catalog (docs/mcp.md)."""
    vault: VaultConfig = VaultConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    """``[telemetry]``: traces of runs over OTLP/HTTP (docs/telemetry.md)."""
    usage: UsageSection = UsageSection()
    budgets: dict[str, Budget] = {}
    """``[budgets.<name>]``: limits on tokens, cost or runs per principal, role or session
    (actors.budgets.config.Budget; docs/usage.md)."""

    def actors(self) -> ActorsConfig:
        """The actor system's settings."""
        return ActorsConfig(
            budgets=RunBudgets(
                max_turns=self.runs.max_turns,
                max_tool_calls=self.runs.max_tool_calls,
                wall_clock_s=self.runs.wall_clock_s,
                max_parallel_tool_calls=self.runs.max_parallel_tool_calls,
            ),
            provider_model=self.provider.model,
            system_prompt=self.runs.system_prompt,
            max_message_bytes=self.sessions.max_message_bytes,
            idle_passivate_s=self.sessions.idle_passivate_s,
            approval_timeout_s=self.approvals.timeout_s,
            context_budget_tokens=self.context.budget_for(self.primary_model()),
            compact_at=self.context.compact_at,
            compact_cooldown_s=self.context.cooldown_s,
            memory_inject_k=self.memory.inject_k,
            memory_min_score=self.memory.min_score,
            memory_min_evidence=self.memory.min_evidence,
        )

    def primary_model(self) -> str:
        """The model of the first endpoint (``[[providers]]``), else ``provider.model``."""
        return self.providers[0].model if self.providers else self.provider.model

    def tools_config(self, data_dir: Path) -> ToolsConfig:
        """The tool runtimes' settings, rooted in the data dir."""
        fields = msgspec.structs.asdict(self.tools)
        del fields["postures"]
        plugins = data_dir / "plugins"
        if fields["workspace_dir"] is None:
            fields["workspace_dir"] = str(data_dir / "workspace")
        # The sandbox must never show the node's own files, wherever the data dir lives.
        fields["shell_hidden_paths"] = (*fields["shell_hidden_paths"], str(data_dir))
        if fields["plugin_dir"] is None and plugins.is_dir():
            fields["plugin_dir"] = str(plugins)
        return ToolsConfig(**fields)


SECTIONS = tuple(NodeConfig.__struct_fields__)
NOT_CONFIG = ("REEL_DATA", "REEL_CONFIG")
"""``REEL_*`` variables that are not config keys: the data dir and the config file's path."""


def env_names() -> dict[str, tuple[str, ...]]:
    """Every override ``load_config`` honours, by table: ``{"http": ("REEL_HTTP_HOST", ...)}``
    (what ``reel node --help`` lists)."""
    defaults = NodeConfig()
    return {
        section: tuple(
            f"REEL_{section.upper()}_{key.upper()}"
            for key in getattr(getattr(defaults, section), "__struct_fields__", ())
        )
        for section in SECTIONS
    }


def env_overrides(environ: Mapping[str, str] | None = None) -> list[str]:
    """The ``REEL_*`` config variables set in ``environ`` (default ``os.environ``), sorted: the
    names ``load_config`` reads (the ready line lists them; their values are never logged)."""
    return [name for name, _, _ in _overrides(environ)]


def _overrides(environ: Mapping[str, str] | None) -> list[tuple[str, str, str]]:
    """``(name, section, key)`` of each ``REEL_<SECTION>_<KEY>`` in ``environ``, sorted."""
    found: list[tuple[str, str, str]] = []
    for name in sorted(environ if environ is not None else os.environ):
        if not name.startswith("REEL_") or name in NOT_CONFIG:
            continue
        section, _, key = name[5:].lower().partition("_")
        if section in SECTIONS:
            found.append((name, section, key))
    return found


RELOADED_LIVE: frozenset[str] = frozenset()
"""The config keys a running node takes up without a restart: none. ``reel node`` reads its
config file and the ``REEL_*`` variables once, when it starts (:func:`transports.runtime.
open_runtime` hands each part its settings then), and never again, so a change to any key takes
effect at its next start. ``reel config show`` marks every key not listed here as needing a
restart; docs/operations.md ("What a running node reads") says the same."""


Source = Literal["default", "file", "env"]


class Setting(msgspec.Struct, frozen=True, kw_only=True):
    """One key of the effective configuration and where its value came from."""

    key: str
    """Dotted: ``runs.max_turns``, ``channels.<name>.dm_policy``."""
    value: Any
    source: Source
    origin: str | None
    """The config file's path (``file``) or the variable's name (``env``); None: the default."""
    restart: bool
    """A running node takes a change of it up only when it restarts (:data:`RELOADED_LIVE`)."""


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> NodeConfig:
    """Read ``path`` (if it exists) and apply ``REEL_*`` overrides from ``environ``."""
    return _load(path, environ)[0]


def effective_settings(
    path: Path | None, environ: Mapping[str, str] | None = None
) -> list[Setting]:
    """Every key :func:`load_config` would give, in declaration order, each with where its
    value came from: ``environ``'s ``REEL_*`` variable, else the file at ``path``, else the
    default. A channel's keys are ``channels.<name>.<key>`` (no channel: one key ``channels``).
    Values are as configured: nothing is redacted here. Raises ConfigError as load_config does."""
    config, origins = _load(path, environ)
    return [
        Setting(
            key=key,
            value=value,
            source=origins[key][0] if key in origins else "default",
            origin=origins[key][1] if key in origins else None,
            restart=key not in RELOADED_LIVE,
        )
        for key, value in _leaves("", config)
    ]


def _leaves(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every key under ``value``: a table's keys, and each table of a
    map of tables (the channels) by name; other values (lists, maps such as ``tools.postures``)
    are one key."""
    tables = (
        isinstance(value, dict)
        and value
        and all(isinstance(v, msgspec.Struct) for v in value.values())
    )
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            yield from _leaves(_dotted(prefix, name), getattr(value, name))
    elif tables:
        for name, table in value.items():
            yield from _leaves(_dotted(prefix, name), table)
    else:
        yield prefix, msgspec.to_builtins(value)


def _dotted(prefix: str, name: str) -> str:
    """``prefix.name``, the name quoted as TOML quotes a key when it holds a dot."""
    part = f'"{name}"' if "." in name else name
    return f"{prefix}.{part}" if prefix else part


def _file_keys(table: dict[str, Any]) -> Iterator[str]:
    """The dotted keys a config file sets (as :func:`_leaves` names them)."""
    for section, keys in table.items():
        if not isinstance(keys, dict):
            yield section
            continue
        for key, value in keys.items():
            if section in ("channels", "budgets") and isinstance(value, dict):
                yield from (_dotted(_dotted(section, key), name) for name in value)
            else:
                yield _dotted(section, key)


def _load(
    path: Path | None, environ: Mapping[str, str] | None
) -> tuple[NodeConfig, dict[str, tuple[Source, str]]]:
    """The config and, for each key set by the file or the environment, where from:
    ``("file", path)`` or ``("env", variable)`` (the variable wins)."""
    table: dict[str, Any] = {}
    origins: dict[str, tuple[Source, str]] = {}
    if path is not None and path.exists():
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
        origins = dict.fromkeys(_file_keys(table), ("file", str(path)))
    values = environ if environ is not None else os.environ
    from_env: dict[str, str] = {}
    for name, section, key in _overrides(values):
        if not key:
            raise ConfigError(f"{name}: names no key of [{section}]")
        table.setdefault(section, {})[key] = _env_value(values[name])
        from_env[f"{section}.{key}"] = name
    try:
        _check_channels(table.get("channels"))
        _check_named(table.get("budgets"), "budgets", Budget, BUDGET_NAME)
        usage = table.get("usage")
        _check_named(
            usage.get("prices") if isinstance(usage, dict) else None, "usage.prices", Price
        )
        config = msgspec.convert(table, NodeConfig)
        return config, origins | {key: ("env", name) for key, name in from_env.items()}
    except msgspec.ValidationError as exc:
        key, problem = _describe(exc)
        if key in from_env:
            message = f"{from_env[key]} (config key {key}): {problem}"
        else:
            where = f"{path}: " if path is not None and path.exists() else ""
            message = f"{where}config key {key}: {problem}"
        # msgspec quotes a bad value, which may be a secret pasted into the wrong key.
        raise ConfigError(redact_text(message)[0]) from None


CHANNEL_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
RESERVED_CHANNELS = frozenset({"http", "grpc", "cli"})
"""Channel names the node's own transports record on runs."""


def _check_channels(channels: Any) -> None:
    """Each ``[channels.<name>]`` on its own, so an error names ``channels.<name>.<key>``
    (msgspec would say ``channels[...]``)."""
    if not isinstance(channels, dict):
        return
    for name, table in channels.items():
        if not CHANNEL_NAME.fullmatch(name) or name in RESERVED_CHANNELS:
            raise msgspec.ValidationError(
                f"a channel name must match {CHANNEL_NAME.pattern} and not be "
                f"{'/'.join(sorted(RESERVED_CHANNELS))} - at `$.channels.{name[:32]}`"
            )
        try:
            msgspec.convert(table, ChannelConfig)
        except msgspec.ValidationError as exc:
            problem, sep, where = str(exc).rpartition(" - at `$")
            path = f"$.channels.{name}{where.rstrip('`')}" if sep else f"$.channels.{name}"
            raise msgspec.ValidationError(f"{problem if sep else exc} - at `{path}`") from None


def _check_named(
    tables: Any, where: str, struct: type[msgspec.Struct], names: re.Pattern[str] | None = None
) -> None:
    """Each ``[<where>.<name>]`` on its own, so an error names ``<where>.<name>.<key>`` (msgspec
    would say ``<where>[...]``)."""
    if not isinstance(tables, dict):
        return
    for name, table in tables.items():
        key = _dotted(f"$.{where}", name)
        if names is not None and not names.fullmatch(name):
            raise msgspec.ValidationError(f"a name must match {names.pattern} - at `{key}`")
        try:
            msgspec.convert(table, struct)
        except msgspec.ValidationError as exc:
            problem, sep, at = str(exc).rpartition(" - at `$")
            path = f"{key}{at.rstrip('`')}" if sep else key
            raise msgspec.ValidationError(f"{problem if sep else exc} - at `{path}`") from None


def unpriced_warnings(config: NodeConfig) -> list[str]:
    """A line per ``[usage.prices]`` model no provider is configured with. Warned, not refused:
    the usage view names a turn by the model the provider said answered, which may differ from
    the configured name (``gpt-4o`` answers as ``gpt-4o-2024-08-06``), and older journals hold
    models no longer configured; both may rightly be priced."""
    configured = {config.provider.model} - {""}
    return [
        f'usage.prices."{model}": no provider is configured with this model; it prices only '
        f"usage recorded under that name (configured: {', '.join(sorted(configured)) or 'none'})"
        for model in sorted(config.usage.prices)
        if model not in configured
    ]


def _env_value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _describe(exc: msgspec.ValidationError) -> tuple[str, str]:
    """The dotted key path and the problem, from msgspec's ``<problem> - at `$.a.b```."""
    text = str(exc)
    message, sep, where = text.rpartition(" - at `$")
    path = where.rstrip("`").lstrip(".") if sep else ""
    if not sep:
        message = text
    unknown = re.match(r"Object contains unknown field `([^`]+)`", message)
    if unknown:
        key = f"{path}.{unknown.group(1)}" if path else unknown.group(1)
        return key, "unknown key"
    # A table's own check (``__post_init__``) says ``<key>: <problem>``.
    own = re.fullmatch(r"([a-z][a-z0-9_]*): (.+)", message, re.DOTALL)
    if own and path:
        return f"{path}.{own.group(1)}", own.group(2)
    return path or "(top level)", message
