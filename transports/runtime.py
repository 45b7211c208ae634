"""Composition: open a data dir's journal, policies, tools and provider, and build a Node.

Used by ``reel node`` (the daemon) and by in-process commands (``reel chat --local``). It is the
one place that knows every package; nothing below ``transports`` imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors import Node, ToolGate
from actors.budgets.guard import BudgetGuard
from actors.checkpoints import history_of
from actors.memory.items import NodeMemory
from actors.provider import ModelProvider
from actors.vault.store import Vault, open_vault
from events import (
    Journal,
    JournalError,
    JournalReader,
    JournalTampered,
    NodeKey,
    VerifyReport,
    Witness,
    verify,
)
from events.port import NodeJournal
from policies import PolicyEngine
from projections import (
    Embedder,
    EmbedderUnavailable,
    IncidentsView,
    MemoryView,
    Projector,
    UsageView,
    Views,
    WatchReads,
    all_projections,
    make_embedder,
)
from tools import ToolCatalog, build_catalog
from transports.access.auth import load_or_create_token
from transports.access.authority import Authority
from transports.access.tokens import load_tokens
from transports.channels import ChannelHub
from transports.config import ConfigError, NodeConfig, load_config, unpriced_warnings
from transports.learning import NodeLearning
from transports.mcp_servers import journal_tool_lists
from transports.models import DeterministicProvider, OpenAIConfig, OpenAIProvider
from transports.models.openai_wire import TOOL_CHOICES
from transports.node.private_dir import make_private

log = logging.getLogger("reel.usage")

SETTLE_S = 1.0
"""How long a budget check at a turn boundary waits for the views to include the journal's
head (actors.budgets.guard); past it the check counts what is folded."""


@dataclass
class Runtime:
    """A composed node over one data dir; ``close()`` stops it, the views and the journal."""

    data_dir: Path
    config: NodeConfig
    journal: NodeJournal
    node: Node
    projector: Projector
    views: Views
    authority: Authority
    """Who a bearer token speaks for and what Cedar lets it do: shared by HTTP and gRPC
    (its token book is folded from the journal's ``token.*`` events at start and updated as
    the API creates and revokes tokens)."""
    memory: NodeMemory
    """The memory view (searched by runs, the memory tools and the API) and the journal that
    memory writes go to."""
    channels: ChannelHub
    """The chat channels of ``[channels]``: their connectors, routers and the inbound entry
    point (docs/channels.md)."""
    incidents: IncidentsView
    """What the watchdog found (``GET /v1/incidents``, ``reel_incidents_open``)."""
    learning: NodeLearning
    """The learning view, the desk that reviews candidates, and post-run reflection."""
    vault: Vault
    """The data dir's secrets (docs/vault.md): tool calls resolve handles through it, the API
    and ``reel vault`` change it."""
    usage: UsageView
    """Tokens and runs by day, principal, session and model (``GET /v1/usage``, ``/metrics``,
    the budget checks; docs/usage.md)."""
    guard: BudgetGuard
    """``[budgets]`` and ``[usage.prices]`` over :attr:`usage`."""

    @property
    def catalog(self) -> ToolCatalog:
        """The node's tools (what an approval's grant options are worked out from)."""
        return self.node.services.catalog

    def close(self, grace_s: float = 10.0, *, sign: bool = True) -> None:
        """Drain and stop the node, sign the final checkpoint (unless ``sign`` is false: a
        command that failed appends nothing, not even a checkpoint), let the views catch up
        with it, then close the journal."""
        try:
            self.learning.stop()  # no more reflections enqueued while the node drains
            self.node.drain(grace_s)  # answers of runs ending now still go out...
            self.channels.stop()  # ...then connectors, followers and channel actors stop
            self.node.stop(grace_s)
            self.catalog.close()  # MCP servers stop once no run can call them
        finally:
            try:
                # The final checkpoint is a row: sign it before the views' last catch-up, so
                # they end at the head the journal closes with. Never after a full
                # verification still running: it is stopped, and signs nothing (the next
                # start verifies again), so a stop never waits for a walk of the journal.
                self.journal.stop_verifying()
                if sign:
                    with contextlib.suppress(JournalError):  # tampered, or the walk stopped
                        self.journal.checkpoint()
                self.projector.close(final_catch_up=True)
                self.memory.close()
                self.learning.close()
                self.views.close()
                self.incidents.close()
                self.usage.close()
            finally:
                self.journal.close(checkpoint=sign)


def prepare_data_dir(data_dir: Path) -> None:
    """Create the data dir (mode 0700, or make an existing one private: transports.node.private_dir)
    and its subdirectories."""
    make_private(data_dir)
    for sub in ("workspace", "plugins", "policies"):
        (data_dir / sub).mkdir(exist_ok=True, mode=0o700)


def make_provider(config: NodeConfig) -> ModelProvider:
    """The configured model provider (the deterministic one by default)."""
    p = config.provider
    if p.kind == "deterministic":
        return DeterministicProvider(chunk_delay_s=p.chunk_delay_s)
    api_key = os.environ.get(p.api_key_env) or None
    try:
        return OpenAIProvider(
            OpenAIConfig(
                base_url=p.base_url,
                model=p.model,
                api_key=api_key,
                timeout_s=p.timeout_s,
                max_retries=p.max_retries,
                stream=p.stream,
                max_tokens=p.max_tokens,
                temperature=p.temperature,
                tool_choice=p.tool_choice,
                extra_body=p.extra_body,
            )
        )
    except ValueError as exc:
        raise ConfigError(f"config key provider.{exc}") from None


def budget_guard(
    cfg: NodeConfig, usage: UsageView, gate: ToolGate, journal: NodeJournal, projector: Projector
) -> BudgetGuard:
    """The budgets and prices over the usage view; tool calls' ``context.usage_today`` reads
    through it too when a policy reads it (:func:`reads_usage`). Prices for models no provider
    is configured with are logged, not refused (:func:`transports.config.unpriced_warnings`
    says why)."""
    for line in unpriced_warnings(cfg):
        log.warning(line)

    def settle() -> None:
        projector.wait_for(journal.committed_position, SETTLE_S)

    guard = BudgetGuard(cfg.budgets, cfg.usage.prices, usage, gate.roles_of, settle)
    if reads_usage(gate.engine):
        gate.usage_of = lambda principal: guard.usage_today(principal, time.time_ns() // 1_000_000)
    return guard


def reads_usage(engine: PolicyEngine) -> bool:
    """Whether an operator policy names ``usage_today``: only then is a tool call's usage read
    from the view (the baseline never reads it, and an unread value needs no read)."""
    files = {Path(s.path) for s in engine.sources if s.operator}
    return any("usage_today" in path.read_text(encoding="utf-8") for path in files)


def check_tool_choice(config: NodeConfig, catalog: ToolCatalog, gate: ToolGate) -> None:
    """``[provider] tool_choice`` naming a tool must name one the model is offered: in the
    catalog and not ``disabled`` by ``[tools] postures`` (what runs are offered is fixed when the
    node starts; a session's posture only changes what the gate allows)."""
    choice = config.provider.tool_choice
    if choice is None or choice in TOOL_CHOICES:
        return
    specs = {spec.name: spec for spec in catalog.specs()}
    spec = specs.get(choice)
    if spec is None:
        names = ", ".join(sorted(specs))
        raise ConfigError(f"config key provider.tool_choice: no tool {choice!r} (tools: {names})")
    if gate.posture(spec) == "disabled":
        raise ConfigError(
            f"config key provider.tool_choice: {choice!r} is disabled (tools.postures), so the "
            "model is never offered it"
        )


def load_embedder(config: NodeConfig) -> Embedder:
    """The memory view's embedder (``[memory] embedder``), built once per node. A name that
    does not load (unknown, or its extra not installed) is a :class:`ConfigError` naming the
    choices or the extra to install."""
    try:
        return make_embedder(config.memory.embedder)
    except EmbedderUnavailable as exc:
        raise ConfigError(f"config key memory.embedder: {exc}") from None


def open_journal(
    data_dir: Path,
    cfg: NodeConfig,
    on_tampered: Callable[[JournalTampered], None] | None = None,
) -> NodeJournal:
    """The data dir's journal opened for writing the node's way: its key, its witness
    (``[journal] witness``), the start-up check (``JournalTampered`` before anything is written
    or signed), then the walk over every row. With ``on_tampered`` (the node) the walk runs on a
    thread while the node serves, nothing is signed until it passes and ``on_tampered`` hears
    when it fails; without it (an offline command) the walk ends before this returns and a
    failure is the same ``JournalTampered``: nothing is appended to a journal the node refuses.

    ``[journal] backend = "postgres"``: the database ``dsn`` names instead (:func:`open_postgres`).
    """
    if cfg.journal.backend == "postgres":
        return open_postgres(cfg)
    witness = (
        Witness.open(Path(cfg.journal.witness), data_dir=data_dir) if cfg.journal.witness else None
    )
    try:
        journal = Journal(
            data_dir / "journal.db",
            node_key=NodeKey.load_or_create(data_dir / "node.key"),
            witness=witness,
            on_tampered=on_tampered or _told_by_wait,
            synchronous=cfg.journal.synchronous,
            checkpoint_every_events=cfg.journal.checkpoint_every_events,
            checkpoint_every_s=cfg.journal.checkpoint_every_s,
        )
    except BaseException:
        if witness is not None:
            witness.close(timeout=0)
        raise
    if on_tampered is None:
        try:
            journal.wait_verified()
        except BaseException:
            journal.close(checkpoint=False)  # tampered, or interrupted before the walk ended
            raise
    return journal


def open_postgres(cfg: NodeConfig) -> NodeJournal:
    """The PostgreSQL journal of ``[journal] dsn``, after every shard chain verified (a fault is
    ``JournalTampered``: nothing is appended to it). psycopg is imported only here. Settings
    only the SQLite journal has (a witness) are refused rather than silently ignored, and a
    ``shards`` that is not the database's is a ``ConfigError`` naming it."""
    section = cfg.journal
    if not section.dsn:
        raise ConfigError("config key journal.dsn: backend postgres needs a dsn (REEL_JOURNAL_DSN)")
    if section.witness:
        raise ConfigError(
            "config key journal.witness: the postgres backend keeps no witness yet "
            "(docs/scale-out.md)"
        )
    try:
        from events.postgres.journal import PostgresJournal
        from events.postgres.verify import verify_database
    except ImportError:
        raise ConfigError(
            "config key journal.backend: postgres needs the postgres extra "
            "(pip install 'reel[postgres]')"
        ) from None
    journal = PostgresJournal(section.dsn, node=os.uname().nodename)  # the writer lock first
    try:
        if section.shards and section.shards != journal.shards:
            raise ConfigError(
                f"config key journal.shards: {section.shards}, but the journal database was "
                f"created with {journal.shards} (the count is fixed at creation)"
            )
        fault = verify_database(section.dsn).fault
        if fault is not None:
            raise JournalTampered(
                f"the journal database fails verification at position {fault.position} "
                f"({fault.kind}: {fault.message}); refusing to open it for writing",
                fault.kind,
                fault.position,
            )
    except BaseException:
        journal.close()
        raise
    return journal


def verify_own(journal: NodeJournal) -> VerifyReport:
    """Walk every row of the node's own journal against its own key and witness (the API's
    journal verify): the SQLite walk, or every shard chain of the PostgreSQL journal."""
    if isinstance(journal, JournalReader):
        key = journal.node_key.public_key if journal.node_key is not None else None
        notes = journal.witness.notes() if journal.witness is not None else None
        return verify(journal, trusted_public_key=key, key_source="node", witness=notes)
    from events.postgres.journal import PostgresJournal
    from events.postgres.verify import verify_database

    assert isinstance(journal, PostgresJournal)
    return verify_database(journal.dsn)


def _told_by_wait(_error: JournalTampered) -> None:
    """``open_journal`` without ``on_tampered``: ``wait_verified`` raises the error itself."""


def open_runtime(
    data_dir: Path,
    *,
    config: NodeConfig | None = None,
    config_path: Path | None = None,
    provider: ModelProvider | None = None,
    on_tampered: Callable[[JournalTampered], None] | None = None,
) -> Runtime:
    """Open everything for ``data_dir`` and start the node (recovering a crash first).

    Returns without waiting for the views: whatever views.db lacks is folded on the projector's
    thread while the node serves (``projector.catching_up``). What needs the views current
    waits for that catch-up: runs' memory and learning reads, the API's lookups of a record
    it does not find yet (transports.http.freshness, ``ServiceContext.catch_up``); start-up
    state (tokens, recovery, grants, tasks, incidents) is read from the journal by kind.

    Raises ConfigError, PolicyError, ToolsError or JournalError with one clear line; nothing is
    left open when it raises. The journal is checked as :func:`open_journal` says: with
    ``on_tampered`` (``reel node``) every row is verified on a thread while the node serves;
    without it (``reel chat --local``) before the node starts, so a journal that fails is
    refused (``JournalTampered``) before anything is appended.
    """
    prepare_data_dir(data_dir)
    admin_token = load_or_create_token(data_dir)
    cfg = config or load_config(config_path or data_dir / "config.toml")
    engine = PolicyEngine.load(data_dir / "policies")
    embedder = load_embedder(cfg)
    # The view's connections open on first use: views.db exists by then (the projector makes it).
    memory = NodeMemory(MemoryView(data_dir / "views.db", embedder, limits=cfg.views))
    tools_config = cfg.tools_config(data_dir)
    assert tools_config.workspace_dir is not None  # tools_config roots it in the data dir
    workspace = Path(tools_config.workspace_dir)
    workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    catalog = build_catalog(
        tools_config,
        memory=memory,
        checkpoint_dir=data_dir / "checkpoints",
        mcp=cfg.mcp,
        mcp_state_dir=data_dir / "mcp",
    )
    try:  # started MCP servers stop if the node does not start
        gate = ToolGate(engine, cfg.tools.postures)
        unknown = sorted(set(cfg.tools.postures) - set(catalog.names()))
        if unknown:
            raise ConfigError(f"config key tools.postures: unknown tool {unknown[0]!r}")
        check_tool_choice(cfg, catalog, gate)
        model = provider or make_provider(cfg)
        channels = ChannelHub(cfg.channels)  # a channel's config error stops here, nothing open yet
        journal = open_journal(data_dir, cfg, on_tampered)
    except BaseException:
        catalog.close()
        raise
    if catalog.checkpoints is not None:  # fs.diff reads the checkpoints on the journal
        catalog.checkpoints.history = history_of(journal, catalog.checkpoints)
    projector: Projector | None = None
    usage: UsageView | None = None
    try:
        journal_tool_lists(
            catalog, journal, {name: set(s.tools) for name, s in cfg.mcp.servers.items()}
        )
        tokens = load_tokens(journal, admin_token)
        vault = open_vault(journal, data_dir, cfg.vault.key_file)
        gate.roles_of = lambda principal: tokens.roles_of(principal, int(time.time() * 1000))
        projector = Projector(journal, data_dir / "views.db", all_projections(embedder))
        memory.bind(journal, projector.wait_caught_up)
        usage = UsageView(data_dir / "views.db", cfg.views)
        guard = budget_guard(cfg, usage, gate, journal, projector)
        node = Node(
            journal=journal,
            provider=model,
            catalog=catalog,
            gate=gate,
            workspace=workspace,
            config=cfg.actors(),
            memory=memory.for_runs(),
            tasks=cfg.tasks,
        )
        learning = NodeLearning(data_dir / "views.db", journal, projector, cfg.learning, cfg.views)
        node.services.vault = vault
        node.services.budgets = guard
        learning.attach(node)  # before start: runs read the view, the queue runs reflections
        node.start()  # recovery reads the journal (by kind, indexed), never the views
        projector.follow(journal)  # the views catch up on its thread while the node serves
        learning.start(node)
    except BaseException:
        if projector is not None:
            projector.close()
        if usage is not None:
            usage.close()
        memory.close()
        journal.close()
        catalog.close()
        raise
    views = Views(data_dir / "views.db", cfg.views)
    authority = Authority(engine, tokens, views, journal)
    # The watchdog reads the views and the journal; it stops first when the node drains.
    node.watch(WatchReads(data_dir / "views.db", journal, journal, projector), cfg.watchdog)
    runtime = Runtime(
        data_dir=data_dir,
        config=cfg,
        journal=journal,
        node=node,
        projector=projector,
        views=views,
        authority=authority,
        channels=channels,
        memory=memory,
        incidents=IncidentsView(data_dir / "views.db", cfg.views),
        learning=learning,
        vault=vault,
        usage=usage,
        guard=guard,
    )
    try:
        channels.start(
            node=node,
            journal=journal,
            projector=projector,
            views_path=data_dir / "views.db",
            authority=authority,
            views_limits=cfg.views,
        )
    except BaseException:
        runtime.close(0)
        raise
    return runtime
