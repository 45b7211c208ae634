"""Composition: open a data dir's journal, policies, tools and provider, and build a Node.

Used by ``reel node`` (the daemon) and by in-process commands (``reel chat --local``). It is the
one place that knows every package; nothing below ``transports`` imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from actors import Node, ToolGate
from actors.budgets.decide import column_of
from actors.budgets.guard import BudgetGuard
from actors.checkpoints import history_of
from actors.errors import UnknownSession
from actors.memory.items import NodeMemory
from actors.messages import ResolveSession, SessionInfo
from actors.provider import ModelProvider
from actors.schedules.desk import ScheduleBook, ScheduleDesk, load_schedules
from actors.sessions.state import stream_of as session_stream
from actors.vault.store import Vault, open_vault
from events import (
    JournalError,
    JournalTampered,
)
from events.errors import ShardNotOwned
from events.port import NodeJournal
from policies import AccessRequest, PolicyEngine
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
from projections.records import ApprovalRecord
from projections.usage import UsageProjection, UsageTotals
from tools import ToolCatalog, build_catalog
from tools.shell import probe_ahead
from transports.access.auth import load_or_create_token
from transports.access.authority import Authority
from transports.access.tokens import TokenBook, follow_tokens
from transports.cluster.latest import LatestCommit
from transports.cluster.singletons import SCHEDULES, WATCHDOG, channel_named, channel_singleton
from transports.config import (
    ConfigError,
    NodeConfig,
    ProviderConfig,
    load_config,
    unpriced_warnings,
)
from transports.journal_open import open_journal
from transports.learning import NodeLearning
from transports.mcp_servers import NodeSecrets, journal_tool_lists
from transports.models import DeterministicProvider
from transports.models.endpoints import EndpointConfig, Secrets, check_endpoints, vault_names
from transports.models.failover import FailoverProvider
from transports.models.openai_wire import TOOL_CHOICES
from transports.node.private_dir import make_private
from transports.telemetry import NodeTracer, open_tracer

if TYPE_CHECKING:
    from transports.channels import ChannelHub
    from transports.cluster.member import ClusterMember

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
    (its token book is folded from the journal's ``token.*`` events at start and follows the
    journal from then on, whoever appends: docs/scale-out.md, "Caches")."""
    memory: NodeMemory
    """The memory view (searched by runs, the memory tools and the API) and the journal that
    memory writes go to."""
    channels: ChannelHub | None
    """The chat channels of ``[channels]``: their connectors, routers and the inbound entry
    point (docs/channels.md); None without any (the hub is then never imported:
    ``transports.channels.configured`` answers for it)."""
    incidents: IncidentsView
    """What the watchdog found (``GET /v1/incidents``, ``reel_incidents_open``)."""
    learning: NodeLearning
    """The learning view, the desk that reviews candidates, and post-run reflection."""
    vault: Vault
    """The data dir's secrets (docs/vault.md): tool calls resolve handles through it, the API
    and ``reel vault`` change it."""
    schedules: ScheduleDesk
    """The schedules (docs/schedules.md): the API changes them through its book, its thread
    fires them."""
    usage: UsageView
    """Tokens and runs by day, principal, session and model (``GET /v1/usage``, ``/metrics``,
    the budget checks; docs/usage.md)."""
    guard: BudgetGuard
    """``[budgets]`` and ``[usage.prices]`` over :attr:`usage`."""
    tracer: NodeTracer | None = None
    """Where runs' spans go (``[telemetry]``, docs/telemetry.md); None: no telemetry."""
    cluster: ClusterMember | None = None
    """This node's part in a cluster (``[cluster]``, docs/scale-out.md); None: a lone node."""
    latest: LatestCommit | None = None
    """A cluster node's asker of the database's last commit (:meth:`latest_position`)."""

    def principal_live(self, principal: str) -> bool:
        """Whether ``principal`` holds a live token now (what a schedule's runs need: roles)."""
        return bool(self.authority.tokens.roles_of(principal, int(time.time() * 1000)))

    async def latest_position(self, timeout: float) -> int:
        """The last position committed on any node: a lone node's journal knows; a cluster
        node asks the database (:mod:`transports.cluster.latest`), and when it does not answer
        within ``timeout`` (away: reads answer from the views), what this node knows."""
        known = self.journal.committed_position
        if self.latest is None:
            return known
        head = await self.latest.position(timeout)
        return known if head is None else max(known, head)

    @property
    def catalog(self) -> ToolCatalog:
        """The node's tools (what an approval's grant options are worked out from)."""
        return self.node.services.catalog

    def close(self, grace_s: float = 10.0, *, sign: bool = True) -> None:
        """Drain and stop the node, sign the final checkpoint (unless ``sign`` is false: a
        command that failed appends nothing, not even a checkpoint), let the views catch up
        with it, then close the journal."""
        try:
            self.schedules.stop()  # nothing fires while the node drains
            self.learning.stop()  # no more reflections enqueued while the node drains
            self.node.drain(grace_s)  # answers of runs ending now still go out...
            if self.channels is not None:  # ...then connectors, followers, channel actors
                self.channels.stop()
            if self.cluster is not None:  # no more forwarded commands, nor shard changes
                self.cluster.stop_serving()
            self.node.stop(grace_s)
            self.catalog.close()  # MCP servers stop once no run can call them
            if self.tracer is not None:  # the spans of runs that ended while draining go out
                self.tracer.close()
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
                if self.latest is not None:
                    self.latest.close()
                self.journal.close(checkpoint=sign)
                if self.cluster is not None:  # its shards go to the others at their next tick
                    self.cluster.leave()


def may_run_in(
    node: Node, engine: PolicyEngine, tokens: TokenBook, principal: str, key: str
) -> str | None:
    """Why ``principal`` may not start a run in the session ``key`` now (None: it may), as an
    API call would be decided: ``run.start`` in the session with its owner, ``session.create``
    when no session has that key. What a schedule's run is checked against before it is asked
    for, so a schedule cannot reach into a session its principal could not run in."""
    roles = tokens.roles_of(principal, int(time.time() * 1000))
    try:
        found: SessionInfo = node.ask(ResolveSession(session_key=key), timeout=10)
    except UnknownSession:
        request = AccessRequest(principal=principal, roles=roles, action="session.create")
    else:
        (created,) = node.services.journal.read_stream(session_stream(found.session_id), limit=1)
        context = {"session_id": found.session_id, "owner": created.principal}
        request = AccessRequest(
            principal=principal,
            roles=roles,
            action="run.start",
            resource_id=found.session_id,
            context=context,
        )
    decision = engine.authorize(request)
    if decision.allowed:
        return None
    return f"{principal} may not {request.action} for session key {key!r}: {decision.reason}"


def prepare_data_dir(data_dir: Path) -> None:
    """Create the data dir (mode 0700, or make an existing one private: transports.node.private_dir)
    and its subdirectories."""
    make_private(data_dir)
    for sub in ("workspace", "plugins", "policies"):
        (data_dir / sub).mkdir(exist_ok=True, mode=0o700)


def make_provider(
    config: NodeConfig, secrets: Secrets | None = None, environ: Mapping[str, str] | None = None
) -> ModelProvider:
    """The configured model provider: failover over ``[[providers]]``, or over the one endpoint
    ``[provider]`` describes (the deterministic one, by default, alone: it has nothing to fail
    over). ``secrets`` reads the vault keys endpoints name, when each is first used."""
    env = os.environ if environ is None else environ
    p = config.provider
    if config.providers:
        if p != ProviderConfig():
            raise ConfigError(
                "config key provider: [provider] and [[providers]] are both set; move the "
                "[provider] endpoint into the [[providers]] list"
            )
        try:
            check_endpoints(config.providers, env)
        except ValueError as exc:
            raise ConfigError(f"config key {exc}") from None
        return FailoverProvider(config.providers, secrets)
    if p.kind == "deterministic":
        return DeterministicProvider(chunk_delay_s=p.chunk_delay_s)
    options: dict[str, Any] = {
        "base_url": p.base_url,
        "model": p.model,
        "timeout_s": p.timeout_s,
        "max_retries": p.max_retries,
        "stream": p.stream,
        "max_tokens": p.max_tokens,
        "temperature": p.temperature,
        "tool_choice": p.tool_choice,
        "extra_body": p.extra_body,
    }
    from transports.models import OpenAIConfig  # the openai client only when one is configured

    try:
        OpenAIConfig(**options)  # [provider]'s own checks, and their messages
        endpoint = EndpointConfig(kind="openai", api_key_env=p.api_key_env, **options)
    except ValueError as exc:
        raise ConfigError(f"config key provider.{exc}") from None
    return FailoverProvider([endpoint], secrets)


def check_provider_keys(config: NodeConfig, vault: Vault) -> None:
    """Every vault secret an endpoint's key names exists (a ConfigError naming the key)."""
    for index, name in vault_names(config.providers):
        if not vault.has(name):
            raise ConfigError(
                f"config key providers[{index}].api_key: the vault holds no secret {name!r} "
                f"(reel vault set {name})"
            )


def usage_totals(projector: Projector) -> UsageTotals:
    """The in-memory totals the projector's usage view keeps (budgets and ``/metrics`` read
    them)."""
    (totals,) = [p.totals for p in projector.projections if isinstance(p, UsageProjection)]
    return totals


def budget_guard(
    cfg: NodeConfig, gate: ToolGate, journal: NodeJournal, projector: Projector
) -> BudgetGuard:
    """The budgets and prices over the totals the projector's usage view folds; tool calls'
    ``context.usage_today`` reads through it too when a policy reads it (:func:`reads_usage`).
    Prices for models no provider is configured with are logged, not refused
    (:func:`transports.config.unpriced_warnings` says why)."""
    for line in unpriced_warnings(cfg):
        log.warning(line)

    def settle() -> None:
        projector.wait_for(journal.committed_position, SETTLE_S)

    totals = usage_totals(projector)
    guard = BudgetGuard(cfg.budgets, cfg.usage.prices, totals, gate.roles_of, settle)
    columns = {column_of(budget) for budget in cfg.budgets.values()}
    if reads_usage(gate.engine):
        columns.add("principal")
        gate.usage_of = lambda principal: guard.usage_today(principal, time.time_ns() // 1_000_000)
    totals.count_for(columns)  # what nothing reads is not counted
    return guard


def reads_usage(engine: PolicyEngine) -> bool:
    """Whether an operator policy names ``usage_today``: only then is a tool call's usage read
    from the view (the baseline never reads it, and an unread value needs no read)."""
    files = {Path(s.path) for s in engine.sources if s.operator}
    return any("usage_today" in path.read_text(encoding="utf-8") for path in files)


def check_tool_choice(config: NodeConfig, catalog: ToolCatalog, gate: ToolGate) -> None:
    """A ``tool_choice`` naming a tool (``[provider]``'s, or an endpoint's of ``[[providers]]``)
    must name one the model is offered: in the catalog and not ``disabled`` by ``[tools]
    postures`` (what runs are offered is fixed when the node starts; a session's posture only
    changes what the gate allows)."""
    choices = [("provider.tool_choice", config.provider.tool_choice)] + [
        (f"providers[{i}].tool_choice", e.tool_choice) for i, e in enumerate(config.providers)
    ]
    specs = {spec.name: spec for spec in catalog.specs()}
    for key, choice in choices:
        if choice is None or choice in TOOL_CHOICES:
            continue
        spec = specs.get(choice)
        if spec is None:
            names = ", ".join(sorted(specs))
            raise ConfigError(f"config key {key}: no tool {choice!r} (tools: {names})")
        if gate.posture(spec) == "disabled":
            raise ConfigError(
                f"config key {key}: {choice!r} is disabled (tools.postures), so the "
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
    ``on_tampered`` (``reel node``) every row is verified on a thread while the node serves,
    from ``runtime.journal.start_verifying()`` on;
    without it (``reel chat --local``) before the node starts, so a journal that fails is
    refused (``JournalTampered``) before anything is appended.
    """
    prepare_data_dir(data_dir)
    admin_token = load_or_create_token(data_dir)
    cfg = config or load_config(config_path or data_dir / "config.toml")
    tools_config = cfg.tools_config(data_dir)
    assert tools_config.workspace_dir is not None  # tools_config roots it in the data dir
    workspace = Path(tools_config.workspace_dir)
    workspace.mkdir(mode=0o700, parents=True, exist_ok=True)
    # shell.run's sandbox probe mostly waits for ldconfig and bwrap: begun now, it overlaps the
    # policies, the journal's check and the rest up to build_catalog, which takes its result.
    probe_ahead(tools_config)
    engine = PolicyEngine.load(data_dir / "policies")
    embedder = load_embedder(cfg)
    # The view's connections open on first use: views.db exists by then (the projector makes it).
    memory = NodeMemory(MemoryView(data_dir / "views.db", embedder, limits=cfg.views))
    channels = channel_hub(cfg)  # a channel's config error stops here, nothing opened
    # The journal and the vault next: MCP servers start with the catalog, and the vault
    # handles in their env are decided (vault.use, on the journal) and resolved as they start.
    cluster = join_cluster(cfg, engine.digest)
    try:
        journal = open_journal(data_dir, cfg, on_tampered, cluster)
    except BaseException:
        if cluster is not None:
            cluster.stop_serving()
            cluster.leave()
        raise
    try:
        vault = open_vault(journal, data_dir, cfg.vault.key_file)
        catalog = build_catalog(
            tools_config,
            memory=memory,
            checkpoint_dir=data_dir / "checkpoints",
            mcp=cfg.mcp,
            mcp_state_dir=data_dir / "mcp",
            mcp_secrets=NodeSecrets(vault, engine, journal),
        )
    except BaseException:
        journal.close()
        raise
    try:  # started MCP servers stop if the node does not start
        gate = ToolGate(engine, cfg.tools.postures)
        unknown = sorted(set(cfg.tools.postures) - set(catalog.names()))
        if unknown:
            raise ConfigError(f"config key tools.postures: unknown tool {unknown[0]!r}")
        check_tool_choice(cfg, catalog, gate)
        check_provider_keys(cfg, vault)
        model = provider or make_provider(cfg, vault.resolve)
        tracer = open_tracer(cfg.telemetry)
    except BaseException:
        catalog.close()
        journal.close()
        raise
    if catalog.checkpoints is not None:  # fs.diff reads the checkpoints on the journal
        catalog.checkpoints.history = history_of(journal, catalog.checkpoints)
    projector: Projector | None = None
    schedules: ScheduleDesk | None = None
    usage: UsageView | None = None
    try:
        journal_tool_lists(
            catalog, journal, {name: set(s.tools) for name, s in cfg.mcp.servers.items()}
        )
        tokens = follow_tokens(journal, admin_token)
        gate.roles_of = lambda principal: tokens.roles_of(principal, int(time.time() * 1000))
        projector = Projector(
            journal, data_dir / "views.db", all_projections(embedder, memory.view.matrix)
        )
        memory.bind(journal, projector.wait_caught_up)
        usage = UsageView(data_dir / "views.db", usage_totals(projector), cfg.views)
        guard = budget_guard(cfg, gate, journal, projector)
        node = Node(
            journal=journal,
            provider=model,
            catalog=catalog,
            gate=gate,
            workspace=workspace,
            config=cfg.actors(),
            memory=memory.for_runs(),
            tasks=cfg.tasks,
            # a cluster decides task leases on the database's clock, whatever this machine's
            task_clock=cluster.keeper.database_ms if cluster is not None else None,
        )
        learning = NodeLearning(data_dir / "views.db", journal, projector, cfg.learning, cfg.views)
        node.services.vault = vault
        registry = node.services.registry
        schedules = ScheduleDesk(
            ScheduleBook(
                journal,
                load_schedules(journal),
                max_text_bytes=node.services.config.max_message_bytes,
            ),
            start_run=node.send,
            run_live=lambda run_id: (
                registry.live_run(run_id) is not None or registry.queued_session(run_id) is not None
            ),
            principal_live=lambda who: bool(tokens.roles_of(who, int(time.time() * 1000))),
            may_run=partial(may_run_in, node, engine, tokens),
        )
        node.services.schedules = schedules  # the watchdog's incidents about stopped ones
        node.services.tracer = tracer
        node.services.budgets = guard
        learning.attach(node)  # before start: runs read the view, the queue runs reflections
        node.start(recover=cluster is None)  # recovery reads the journal, never the views
        projector.follow(journal)  # the views catch up on its thread while the node serves
        learning.start(node, cluster.membership.serves if cluster and cluster.membership else None)
        if cluster is None:
            schedules.start()  # after recovery: fired runs never answered are asked for again
        else:  # every node changes schedules; one fires them
            schedules.book.reload = partial(load_schedules, journal)
            cluster.run_while_held(SCHEDULES, schedules.start, schedules.stop)
    except BaseException:
        if schedules is not None:
            schedules.stop()
        if projector is not None:
            projector.close()
        if usage is not None:
            usage.close()
        memory.close()
        journal.close()
        if cluster is not None:
            cluster.stop_serving()
            cluster.leave()
        catalog.close()
        if tracer is not None:
            tracer.close()
        raise
    views = Views(data_dir / "views.db", cfg.views)
    if cluster is not None:
        serve_cluster(cluster, node, journal, projector, views, channels)
    authority = Authority(engine, tokens, views, journal)
    # The watchdog reads the views and the journal; it stops first when the node drains. In a
    # cluster one node watches for all, on the database's clock.
    reads = WatchReads(data_dir / "views.db", journal, journal, projector)
    if cluster is None:
        node.watch(reads, cfg.watchdog)
    else:
        keeper = cluster.keeper
        cluster.run_while_held(
            WATCHDOG,
            partial(
                node.watch,
                reads,
                cfg.watchdog,
                clock=keeper.database_ms,
                holding=partial(keeper.holds, WATCHDOG),
            ),
            node.stop_watchdog,
        )
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
        schedules=schedules,
        tracer=tracer,
        usage=usage,
        guard=guard,
        cluster=cluster,
        latest=None if cluster is None else LatestCommit(journal),
    )
    try:
        if channels is not None:
            channels.start(
                node=node,
                journal=journal,
                projector=projector,
                views_path=data_dir / "views.db",
                authority=authority,
                views_limits=cfg.views,
                run=cluster is None,
            )
        if channels is not None and cluster is not None:  # each on one node at a time
            assert cluster.router is not None
            channels.elsewhere = cluster.router.send
            for name in channels.configs:
                cluster.run_while_held(
                    channel_singleton(name),
                    partial(channels.start_channel, name),
                    partial(channels.stop_channel, name, 0.0),  # the next holder answers
                )
    except BaseException:
        runtime.close(0)
        raise
    return runtime


def join_cluster(config: NodeConfig, policies_digest: str) -> ClusterMember | None:
    """``[cluster]``'s member (its internal port bound), or None for a lone node; a ConfigError
    naming the key when a cluster is asked for without the PostgreSQL journal.
    ``policies_digest``: the loaded policies' (part of the node's ``config_hash``)."""
    if not config.cluster.node:
        return None
    if config.journal.backend != "postgres":
        raise ConfigError(
            'config key cluster.node: a cluster needs [journal] backend = "postgres" '
            "(REEL_JOURNAL_BACKEND)"
        )
    from transports.cluster.config_hash import config_hash
    from transports.cluster.member import ClusterMember

    return ClusterMember(config.cluster, config_hash(config, policies_digest))


def serve_cluster(
    cluster: ClusterMember,
    node: Node,
    journal: NodeJournal,
    projector: Projector,
    views: Views,
    channels: ChannelHub | None,
) -> None:
    """Start the cluster's internal service and router over the running node: the node's own
    commands and, for the channels running here, the channels' requests."""
    from actors.channels.requests import CHANNEL_REQUESTS
    from events.postgres.journal import PostgresJournal

    assert isinstance(journal, PostgresJournal) and journal.node_key is not None

    def approval(approval_id: str) -> ApprovalRecord | None:
        record = views.approval(approval_id)
        if record is None:  # asked on a node whose views have not got there yet
            projector.wait_for(journal.committed_position, 2.0)
            record = views.approval(approval_id)
        return record

    def here(command: Any) -> Future[Any]:
        if isinstance(command, CHANNEL_REQUESTS):
            if channels is None:  # configured on the sender, not here: its config differs
                raise ShardNotOwned("no channel runs on this node")
            return channels.run_here(command)
        return node.send_here(command)

    def running(singleton: str) -> bool:
        channel = channel_named(singleton)
        return channels is not None and channel is not None and channels.running(channel)

    cluster.serve(
        node,
        journal,
        journal.node_key,
        visible=projector.wait_for,
        approval=approval,
        here=here,
        running=running,
    )


def channel_hub(config: NodeConfig) -> ChannelHub | None:
    """The hub of ``[channels]`` (each connector built: a config error is a ConfigError naming
    the key), or None when no channel is configured: the hub's module, the channel actor and
    the connectors are then not imported."""
    if not config.channels:
        return None
    from transports.channels import ChannelHub

    return ChannelHub(config.channels)
